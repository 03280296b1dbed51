#include "engine/optim/grad_sync.h"

#include <mutex>
#include <unordered_map>

namespace engine::optim {
namespace {

struct Attachments {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, GradSyncSwitch*> targets;
};

Attachments& attachments() {
  static Attachments instance;
  return instance;
}

}  // namespace

void attach_grad_sync(const torch::nn::Module* module, GradSyncSwitch* target) {
  std::lock_guard<std::mutex> lock(attachments().mutex);
  attachments().targets[module] = target;
}

void detach_grad_sync(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(attachments().mutex);
  attachments().targets.erase(module);
}

GradSyncSwitch* grad_sync_of(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(attachments().mutex);
  auto it = attachments().targets.find(module);
  return it == attachments().targets.end() ? nullptr : it->second;
}

}  // namespace engine::optim
