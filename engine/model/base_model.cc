#include "engine/model/base_model.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/GradMode.h>

#include "engine/dist/errors.h"
#include "engine/dist/helpers.h"
#include "engine/dist/info.h"
#include "engine/optim/optim_wrapper.h"
#include "engine/optim/optim_wrapper_dict.h"

namespace engine::model {

ForwardMode parse_forward_mode(const std::string& mode) {
  if (mode == "loss") return ForwardMode::kLoss;
  if (mode == "predict") return ForwardMode::kPredict;
  if (mode == "tensor") return ForwardMode::kTensor;
  throw dist::InvalidArgument(
      dist::on_rank(dist::get_rank(), "unknown forward mode \"" + mode +
                                          "\"; use \"loss\", \"predict\" or "
                                          "\"tensor\""));
}

ParsedLosses parse_losses(const TensorDict& losses, const dist::GroupPtr& group,
                          bool across_ranks) {
  ParsedLosses parsed;
  for (const auto& [name, value] : losses) {
    if (!value.defined()) {
      throw dist::InvalidArgument(
          dist::on_rank(dist::get_rank(), "loss entry \"" + name +
                                              "\" is an undefined tensor; return a tensor "
                                              "(or leave the entry out)"));
    }
    at::Tensor mean = value.mean();
    if (name.find("loss") != std::string::npos) {
      parsed.loss = parsed.loss.defined() ? parsed.loss + mean : mean;
    }
    parsed.log_vars[name] = mean.detach().clone();
  }
  if (!parsed.loss.defined()) {
    throw dist::InvalidArgument(
        dist::on_rank(dist::get_rank(),
                      "no loss entry: forward(\"loss\") must return at least one entry whose "
                      "name contains \"loss\""));
  }
  parsed.log_vars["loss"] = parsed.loss.detach().clone();
  if (across_ranks && dist::is_distributed()) {
    dist::all_reduce_dict(parsed.log_vars, "mean", group);
  }
  return parsed;
}

TensorDict BaseModel::preprocess(const TensorDict& data, bool /*training*/) {
  auto params = parameters();
  if (params.empty()) return data;
  TensorDict moved;
  for (const auto& [name, value] : data) moved[name] = value.to(params.front().device());
  return moved;
}

TensorDict BaseModel::train_step(const TensorDict& data, optim::OptimWrapper& optim_wrapper) {
  auto scope = optim_wrapper.optim_context(optim::grad_sync_of(this));
  ParsedLosses parsed = parse_losses(forward(preprocess(data, true), ForwardMode::kLoss));
  optim_wrapper.update_params(parsed.loss);
  return parsed.log_vars;
}

TensorDict BaseModel::train_step(const TensorDict&, optim::OptimWrapperDict& optim_wrappers) {
  throw dist::InvalidArgument(dist::on_rank(
      dist::get_rank(),
      "this model trains with one optimizer wrapper, but optim_wrapper holds " +
          std::to_string(optim_wrappers.size()) +
          " (an OptimWrapperDict); give it one, or override train_step(data, OptimWrapperDict&) "
          "to step each part with its own (under a wrapper, MMSeparateDistributedDataParallel "
          "passes the dict on)"));
}

TensorDict BaseModel::val_step(const TensorDict& data) {
  c10::NoGradGuard no_grad;
  return forward(preprocess(data, false), ForwardMode::kPredict);
}

TensorDict BaseModel::test_step(const TensorDict& data) { return val_step(data); }

}  // namespace engine::model
