#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

// PyTorch's optimizer.state_dict() / load_state_dict() for LibTorch
// optimizers: the state of every parameter as named values, in the order the
// optimizer holds its parameters, so that it can be reshaped (sharded,
// gathered) and put back into an optimizer of the same type. Works for any
// optimizer whose save()/load() use LibTorch's own archive layout (SGD,
// Adam, AdamW, Adagrad, RMSprop), and for ZeroRedundancyOptimizer, whose
// state is the wrapped optimizer's over every rank's share (consolidated
// first: zero_redundancy_optimizer.h).
namespace engine::optim {

using ValueDict = c10::impl::GenericDict;  // Dict<str, Any>

struct OptimizerState {
  // One entry per parameter of every param group, groups in order. An empty
  // dict: the parameter has no state yet (never stepped).
  std::vector<ValueDict> params;
  // Each group's options by name (lr, momentum, betas, ...), and how many
  // of `params` belong to it.
  std::vector<ValueDict> group_options;
  std::vector<int64_t> group_sizes;
};

ValueDict empty_value_dict();

// Every tensor in it is a copy. The states of LibTorch's SGD, Adam, AdamW,
// Adagrad and RMSprop are read directly; any other optimizer's go through
// optimizer_state_through_archive.
OptimizerState optimizer_state(const torch::optim::Optimizer& optimizer);

// The same through the optimizer's own save() and LibTorch's archive: any
// optimizer whose save() keeps LibTorch's layout, at the cost of
// serializing its state and reading it back (the reference that the direct
// reads are tested against).
OptimizerState optimizer_state_through_archive(const torch::optim::Optimizer& optimizer);

// Replaces `optimizer`'s state and group options with `state`, as PyTorch's
// load_state_dict does (LibTorch 1.13's own load() keeps the options). Throws
// InvalidArgument if the groups or their sizes differ from the optimizer's.
void load_optimizer_state(torch::optim::Optimizer& optimizer, const OptimizerState& state);

// `state` in the layout of PyTorch's optimizer.state_dict(), the form
// checkpoints keep: {"state": {index: {name: value}}, "param_groups":
// [{option: value, ..., "params": [index, ...]}]}, indices counting the
// parameters of every group in order; a parameter without state has no
// entry in "state". Only values: unlike LibTorch's own archive of an
// optimizer (a TorchScript module, whose loading compiles and runs the code
// inside it), it loads through the engine's checked unpickler.
c10::IValue to_state_dict(const OptimizerState& state);

// The inverse of to_state_dict. Throws InvalidArgument that starts with
// `what` and says what in `value` is not of that layout.
OptimizerState from_state_dict(const c10::IValue& value, const std::string& what);

}  // namespace engine::optim
