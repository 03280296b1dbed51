#pragma once

#include <memory>

#include "engine/model/base_model.h"

namespace engine::model {

// A model that wraps another: its own parameters are the wrapped module's,
// registered under "module." as in PyTorch, and its steps are the module's
// with distribution added.
class ModelWrapper : public BaseModel {
 public:
  explicit ModelWrapper(std::shared_ptr<BaseModel> module)
      : module_(register_module("module", std::move(module))) {}

  BaseModel& module() { return *module_; }
  const std::shared_ptr<BaseModel>& module_ptr() const { return module_; }

  TensorDict preprocess(const TensorDict& data, bool training) override {
    return module_->preprocess(data, training);
  }
  TensorDict val_step(const TensorDict& data) override { return module_->val_step(data); }
  TensorDict test_step(const TensorDict& data) override { return module_->test_step(data); }

 private:
  std::shared_ptr<BaseModel> module_;
};

// mmengine's is_model_wrapper: whether `model` is one of the engine's
// wrappers (or a user wrapper derived from ModelWrapper).
inline bool is_model_wrapper(const torch::nn::Module& model) {
  return dynamic_cast<const ModelWrapper*>(&model) != nullptr;
}

}  // namespace engine::model
