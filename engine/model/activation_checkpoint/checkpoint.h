#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace torch::nn {
class Module;
}

// Activation checkpointing (torch.utils.checkpoint) for LibTorch, which has
// none (pytorch#52744): a module's forward keeps nothing for its backward
// but its input, and runs again, with gradients, when the backward reaches
// it. Memory falls by the activations inside the module; compute rises by
// one more forward of it.
namespace engine::model {

struct CheckpointOptions {
  // Run the forward again from the random states it started from, so that
  // its draws (dropout masks) repeat: the default generators of the CPU and
  // of the input's device, and each of `generators` (a rank's own generator
  // where ranks share a process). The states after the backward are those
  // before it.
  bool preserve_rng_state = true;
  std::vector<at::Generator> generators;
};

// What a checkpointed module runs. It is kept and called again during the
// backward, so it must capture by value whatever it uses (the module's
// handle, not a reference to a local), and compute the same function of
// its input, the module's parameters and buffers, and the random states.
using CheckpointBody = std::function<at::Tensor(const at::Tensor& input)>;

// body(input), checkpointed. Gradients reach `input` and every parameter of
// `module` that requires grad through the result, exactly as they would
// without checkpointing (same operations, same order, same values, bit for
// bit), so wrappers that hook parameters' gradient accumulators (DDP, FSDP,
// ZeRO) see nothing different. The recomputation runs under the autocast
// setting the forward had; buffers it writes are put back (a BatchNorm's
// running statistics move once per step, as without checkpointing).
// Without grad mode, or when neither the input nor a parameter requires
// grad, this is body(input).
at::Tensor checkpoint(const torch::nn::Module& module, const at::Tensor& input,
                      const CheckpointBody& body, const CheckpointOptions& options = {});

// Whether this thread runs a checkpointed body now (its forward or its
// recomputation).
bool inside_checkpoint();

}  // namespace engine::model
