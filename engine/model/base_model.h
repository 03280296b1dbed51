#pragma once

#include <torch/nn/module.h>

#include <string>
#include <utility>

#include "engine/dist/group.h"
#include "engine/model/tensor_dict.h"

namespace engine::optim {
class OptimWrapper;
class OptimWrapperDict;
}  // namespace engine::optim

namespace engine::model {

// mmengine's three forward modes: "loss" returns named losses, "predict"
// returns predictions, "tensor" returns the raw network output.
enum class ForwardMode { kLoss, kPredict, kTensor };

// "loss" | "predict" | "tensor"; anything else is InvalidArgument naming the
// accepted modes.
ForwardMode parse_forward_mode(const std::string& mode);

// The loss to back-propagate and the values to log, by mmengine's rule.
struct ParsedLosses {
  at::Tensor loss;      // sum of the entries whose name contains "loss"
  TensorDict log_vars;  // every entry's mean (detached), plus "loss"
};

// Each entry reduced to its mean; `loss` = sum of those whose name contains
// "loss". When distributed, the log values are averaged across the ranks of
// `group` (nullptr: the default group; the wrappers pass the group they
// train on), a collective every rank of it makes; the loss itself is not:
// its gradient stays local. `across_ranks` false keeps each rank's own
// values, as mmengine does (a wrapper under Join, where ranks that ran out
// have none).
ParsedLosses parse_losses(const TensorDict& losses, const dist::GroupPtr& group = nullptr,
                          bool across_ranks = true);

// mmengine's BaseModel: a module with a data preprocessor and one forward
// that answers in three modes, plus the step functions that runners call.
class BaseModel : public torch::nn::Module {
 public:
  // The data preprocessor: by default every tensor is moved to the device of
  // the model's first parameter (mmengine's BaseDataPreprocessor); override
  // to normalise, cast or augment. `training` is true in train_step.
  virtual TensorDict preprocess(const TensorDict& data, bool training);

  virtual TensorDict forward(const TensorDict& data, ForwardMode mode) = 0;

  // preprocess -> forward("loss") -> parse_losses -> update_params; returns
  // the log values.
  virtual TensorDict train_step(const TensorDict& data, optim::OptimWrapper& optim_wrapper);
  // With several optimizer wrappers (optim_wrapper configured as a dict of
  // them): a model that has them overrides this and steps each part with
  // its own wrapper, as mmengine's GAN models do. Here: InvalidArgument,
  // the model training with one wrapper.
  virtual TensorDict train_step(const TensorDict& data, optim::OptimWrapperDict& optim_wrappers);
  // preprocess -> forward("predict"), without gradients.
  virtual TensorDict val_step(const TensorDict& data);
  virtual TensorDict test_step(const TensorDict& data);
};

}  // namespace engine::model
