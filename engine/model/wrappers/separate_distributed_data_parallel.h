#pragma once

#include <map>
#include <memory>
#include <string>

#include "engine/model/wrappers/distributed_data_parallel.h"

namespace engine::model {

// mmengine's MMSeparateDistributedDataParallel: every direct child of the
// module that has trainable parameters gets its own reducer (its own DDP),
// and so do the module's own parameters (mmengine leaves those unsynced),
// so that models with several optimizers (GANs) sync each part when that
// part steps. C++ modules call their children directly, so instead of
// replacing the children the wrapper attaches each reducer to its child:
// optim_wrapper.optim_context(optim::grad_sync_of(child.get())) gives the
// child's no_sync, as mmengine's optim_context(self.generator) does.
//
// Options as for MMDistributedDataParallel; find_unused_parameters marks the
// parameters without gradient at the end of backward (the wrapper never sees
// the children's outputs). Buffers are broadcast at the start of train_step.
class MMSeparateDistributedDataParallel : public ModelWrapper, public optim::GradSyncSwitch {
 public:
  MMSeparateDistributedDataParallel(std::shared_ptr<BaseModel> module, DDPOptions options = {});
  ~MMSeparateDistributedDataParallel() override;

  TensorDict forward(const TensorDict& data, ForwardMode mode) override {
    return module().forward(data, mode);
  }
  // The module's own train_step (it steps its optimizers itself).
  TensorDict train_step(const TensorDict& data, optim::OptimWrapper& optim_wrapper) override;
  // The module's own train_step with every wrapper (mmengine's usual case).
  TensorDict train_step(const TensorDict& data, optim::OptimWrapperDict& optim_wrappers) override;

  // No child syncs while the scope lives (mmengine's breaks with two or more
  // children; this one switches every child).
  optim::NoSyncScope no_sync() { return optim::NoSyncScope(this); }
  bool grad_sync_enabled() const override;
  void set_grad_sync_enabled(bool enabled) override;

  // The reducers by child name (children without trainable parameters have
  // none), and under "" the one of the module's own parameters, if any.
  const std::map<std::string, std::unique_ptr<Reducer>>& reducers() const { return reducers_; }

 private:
  DDPOptions options_;
  dist::GroupPtr group_;
  std::map<std::string, std::unique_ptr<Reducer>> reducers_;
  std::vector<const torch::nn::Module*> attached_;
};

}  // namespace engine::model
