#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sim {

// One rank's side of a collective: what every rank must agree on (compared
// before any data moves), plus the tensors it brings. Tensors are borrowed
// handles; the rank keeps them alive until the collective returns.
struct CallRecord {
  // Compared across ranks.
  const char* kind = "";  // "all_reduce", "broadcast", ... (a literal)
  uint64_t seq = 0;       // this rank's call count on the group
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> shape;  // every tensor of the call has this shape
  int root = -1;               // group rank, -1 when the kind has none
  int op = -1;                 // engine::dist::ReduceOp, -1 when none
  std::vector<int> ranks;      // split: the new group's ranks
  int peer = -1;               // send/recv: the other side's group rank

  // Not compared: the data.
  at::Tensor tensor;                // the single tensor of the call (in/out)
  std::vector<at::Tensor> inputs;   // list inputs (scatter on the root, reduce_scatter, all_to_all)
  std::vector<at::Tensor> outputs;  // list outputs (all_gather, gather on the root, all_to_all)

  // "all_reduce #5 (sum, Float[4, 2])".
  std::string describe() const;
  bool same_call(const CallRecord& other) const;
  int64_t payload_bytes() const;
};

}  // namespace sim
