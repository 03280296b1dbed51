#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace torch::nn {
class Module;
}

namespace engine::model {

// Where a model's forward runs a child module that may be a sharding unit.
//
// LibTorch's C++ modules have no forward hooks, and a parent calls its typed
// children directly, so a wrapper cannot slip in around a child's forward by
// itself. A model that wants its children to be units of
// MMFullyShardedDataParallel runs them through call_unit:
//
//   x = call_unit(*fc1, [&] { return fc1->forward(x); });
//
// Under that wrapper, when `module` is one of its units, the unit's
// parameters are gathered for `body` and gathered again before the
// backward of its output; everywhere else (no wrapper, DDP, a module that is
// not a unit) call_unit is `body()`. Every rank must run the same units in
// the same order, as PyTorch's FSDP requires.
class UnitCallHandler {
 public:
  virtual ~UnitCallHandler() = default;
  virtual at::Tensor call(const torch::nn::Module& module,
                          const std::function<at::Tensor()>& body) = 0;
};

at::Tensor call_unit(const torch::nn::Module& module, const std::function<at::Tensor()>& body);

// As above, for a module of one input, which may also run checkpointed:
//
//   x = call_unit(*fc1, x, [this](const at::Tensor& in) { return fc1->forward(in); });
//
// When a CheckpointedModules (engine/model/activation_checkpoint) picks
// `module`, body runs through checkpoint() inside the unit's call, and runs
// again in the backward: capture by value what it uses (`this`, not a
// local by reference). A unit of a sharding
// wrapper called inside a checkpointed body is an InvalidArgument on the
// rank (its parameters would be freed before its recomputation uses them):
// checkpoint the unit itself, or modules inside it.
at::Tensor call_unit(const torch::nn::Module& module, const at::Tensor& input,
                     const std::function<at::Tensor(const at::Tensor&)>& body);

// The wrapper's side: `handler` runs the calls of `module` until detached.
void attach_unit_handler(const torch::nn::Module* module, UnitCallHandler* handler);
void detach_unit_handler(const torch::nn::Module* module);

}  // namespace engine::model
