#pragma once

namespace torch::nn {
class Module;
}

namespace engine::optim {

// A model whose backward can skip gradient synchronisation (DDP's no_sync).
// OptimWrapper turns it off on the intermediate steps of gradient
// accumulation without knowing which wrapper it talks to.
class GradSyncSwitch {
 public:
  virtual ~GradSyncSwitch() = default;
  virtual bool grad_sync_enabled() const = 0;
  virtual void set_grad_sync_enabled(bool enabled) = 0;
};

// Disables a switch's synchronisation for its lifetime and restores the
// previous setting (nested scopes keep working).
class NoSyncScope {
 public:
  explicit NoSyncScope(GradSyncSwitch* target) : target_(target) {
    if (target_ == nullptr) return;
    previous_ = target_->grad_sync_enabled();
    target_->set_grad_sync_enabled(false);
  }
  ~NoSyncScope() {
    if (target_ != nullptr) target_->set_grad_sync_enabled(previous_);
  }
  NoSyncScope(NoSyncScope&& other) noexcept : target_(other.target_), previous_(other.previous_) {
    other.target_ = nullptr;
  }
  NoSyncScope(const NoSyncScope&) = delete;
  NoSyncScope& operator=(const NoSyncScope&) = delete;
  NoSyncScope& operator=(NoSyncScope&&) = delete;

 private:
  GradSyncSwitch* target_;
  bool previous_ = true;
};

// Where a wrapper says which switch governs a module's gradients, so that
// code holding only the module (a model's own train_step, or a GAN's
// generator inside MMSeparateDistributedDataParallel) can ask for no_sync, as
// mmengine's optim_context(model) does. nullptr when nothing is attached.
void attach_grad_sync(const torch::nn::Module* module, GradSyncSwitch* target);
void detach_grad_sync(const torch::nn::Module* module);
GradSyncSwitch* grad_sync_of(const torch::nn::Module* module);

}  // namespace engine::optim
