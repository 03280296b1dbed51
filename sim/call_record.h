#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "engine/dist/call.h"

namespace sim {

// One rank's side of a collective: its signature, which every rank must
// agree on (compared before any data moves), plus the tensors it brings.
// Tensors are borrowed handles; the rank keeps them alive until the
// collective returns.
struct CallRecord : engine::dist::CallSignature {
  at::Tensor tensor;                // the single tensor of the call (in/out)
  std::vector<at::Tensor> inputs;   // list inputs (scatter on the root, reduce_scatter, all_to_all)
  std::vector<at::Tensor> outputs;  // list outputs (all_gather, gather on the root, all_to_all)
};

}  // namespace sim
