#pragma once

#include <ATen/core/Tensor.h>

namespace engine::optim {

// A wrapper that keeps parameters in another form between optimizer steps
// than the optimizer must see (ZeRO stages 1-2 keep them whole and let the
// optimizer step only this rank's shard). OptimWrapper::step calls
// before_step on every hook attached to its parameters, in the order they
// first appear among them, then clips and steps, then after_step in the
// same order. Both may be collective: every rank steps the same parameters.
class StepHook {
 public:
  virtual ~StepHook() = default;
  virtual void before_step() = 0;
  virtual void after_step() = 0;
};

// Keyed by the parameter's TensorImpl, which set_data keeps.
void attach_step_hook(const at::Tensor& param, StepHook* hook);
void detach_step_hook(const at::Tensor& param);
StepHook* step_hook_of(const at::Tensor& param);

}  // namespace engine::optim
