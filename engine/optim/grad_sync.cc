#include "engine/optim/grad_sync.h"

#include "engine/registry/attachments.h"

namespace engine::optim {
namespace {

registry::Attachments<torch::nn::Module, GradSyncSwitch>& switches() {
  static registry::Attachments<torch::nn::Module, GradSyncSwitch> instance;
  return instance;
}

}  // namespace

void attach_grad_sync(const torch::nn::Module* module, GradSyncSwitch* target) {
  switches().attach(module, target);
}

void detach_grad_sync(const torch::nn::Module* module) { switches().detach(module); }

GradSyncSwitch* grad_sync_of(const torch::nn::Module* module) { return switches().find(module); }

}  // namespace engine::optim
