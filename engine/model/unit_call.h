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

// The wrapper's side: `handler` runs the calls of `module` until detached.
void attach_unit_handler(const torch::nn::Module* module, UnitCallHandler* handler);
void detach_unit_handler(const torch::nn::Module* module);

}  // namespace engine::model
