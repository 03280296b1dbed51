#include "engine/optim/step_hook.h"

#include "engine/registry/attachments.h"

namespace engine::optim {
namespace {

registry::Attachments<c10::TensorImpl, StepHook>& hooks() {
  static registry::Attachments<c10::TensorImpl, StepHook> instance;
  return instance;
}

}  // namespace

void attach_step_hook(const at::Tensor& param, StepHook* hook) {
  hooks().attach(param.unsafeGetTensorImpl(), hook);
}

void detach_step_hook(const at::Tensor& param) { hooks().detach(param.unsafeGetTensorImpl()); }

StepHook* step_hook_of(const at::Tensor& param) {
  return hooks().find(param.unsafeGetTensorImpl());
}

}  // namespace engine::optim
