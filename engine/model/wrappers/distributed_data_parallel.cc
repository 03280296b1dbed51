#include "engine/model/wrappers/distributed_data_parallel.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/model/batch_norm.h"
#include "engine/model/named_parameter.h"
#include "engine/model/wrappers/parameter_sync.h"
#include "engine/optim/optim_wrapper.h"

namespace engine::model {

ReducerOptions reducer_options(const DDPOptions& options) {
  ReducerOptions reducer;
  reducer.bucket_cap_bytes = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);
  reducer.first_bucket_cap_bytes =
      std::min(reducer.first_bucket_cap_bytes, reducer.bucket_cap_bytes);
  reducer.find_unused_parameters = options.find_unused_parameters;
  reducer.static_graph = options.static_graph;
  reducer.gradient_as_bucket_view = options.gradient_as_bucket_view;
  reducer.on_bucket_launch = options.on_bucket_launch;
  return reducer;
}

dist::GroupPtr wrapper_group(const dist::GroupPtr& requested, const std::string& wrapper) {
  dist::GroupPtr group = requested ? requested : dist::get_default_group();
  if (!group) {
    throw dist::InvalidArgument(wrapper +
                                " needs an initialised process group: call "
                                "engine::dist::init_dist (or use a single-device "
                                "strategy) first");
  }
  if (!group->is_member()) {
    throw dist::InvalidArgument(
        dist::on_rank(group->my_global_rank(),
                      wrapper + " on a group this rank is not in (" + group->describe() + ")"));
  }
  return group;
}

std::vector<NamedParameter> trainable_parameters(torch::nn::Module& module, bool recurse) {
  std::vector<NamedParameter> params;
  for (auto& param : unique_named_parameters(module, recurse)) {
    if (param.tensor.requires_grad()) params.push_back(std::move(param));
  }
  return params;
}

std::vector<NamedParameter> synchronised_parameters(torch::nn::Module& module,
                                                    const dist::GroupPtr& group) {
  std::vector<NamedParameter> params = trainable_parameters(module);
  verify_same_parameters(params, group);
  broadcast_module_state(module, group);
  return params;
}

void broadcast_module_state(torch::nn::Module& module, const dist::GroupPtr& group, int source) {
  std::vector<at::Tensor> tensors;
  for (const auto& param : module.parameters()) tensors.push_back(param);
  for (const auto& buffer : module.buffers()) tensors.push_back(buffer);
  broadcast_from_rank(tensors, group, source);
}

void broadcast_buffers(torch::nn::Module& module, const dist::GroupPtr& group, int source) {
  std::vector<at::Tensor> buffers;
  for (const auto& buffer : module.buffers()) buffers.push_back(buffer);
  if (!buffers.empty()) broadcast_from_rank(buffers, group, source);
}

MMDistributedDataParallel::MMDistributedDataParallel(std::shared_ptr<BaseModel> module,
                                                     DDPOptions options)
    : ModelWrapper(std::move(module)),
      options_(std::move(options)),
      group_(wrapper_group(options_.process_group, "MMDistributedDataParallel")) {
  reducer_ = std::make_unique<Reducer>(synchronised_parameters(this->module(), group_), group_,
                                       reducer_options(options_));
  if (options_.comm_hook) reducer_->register_comm_hook(options_.comm_hook);
  optim::attach_grad_sync(this, this);
  optim::attach_grad_sync(&this->module(), this);
}

MMDistributedDataParallel::~MMDistributedDataParallel() {
  optim::detach_grad_sync(this);
  optim::detach_grad_sync(&module());
}

TensorDict MMDistributedDataParallel::forward(const TensorDict& data, ForwardMode mode) {
  const auto started = std::chrono::steady_clock::now();
  const bool training = module().is_training();
  std::optional<JoinRound> round;
  if (training && at::GradMode::is_enabled()) {
    round = notify_join(*this, reducer_->grad_sync_enabled());
    if (round) refuse_unshadowable_join();
  }
  joining_ = round.has_value();
  if (training && options_.broadcast_buffers) {
    broadcast_buffers(module(), group_, round ? round->authoritative_rank() : 0);
  }
  TensorDict outputs = module().forward(data, mode);
  if (training && at::GradMode::is_enabled() && reducer_->grad_sync_enabled()) {
    ++timed_forwards_;
    forward_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - started)
                       .count();
    std::vector<at::Tensor> tensors;
    for (const auto& [name, tensor] : outputs) tensors.push_back(tensor);
    reducer_->prepare_for_backward(tensors);
  }
  return outputs;
}

TensorDict MMDistributedDataParallel::train_step(const TensorDict& data,
                                                 optim::OptimWrapper& optim_wrapper) {
  auto scope = optim_wrapper.optim_context(this);
  TensorDict losses = forward(preprocess(data, true), ForwardMode::kLoss);
  shadow_optim_ = joining_ ? &optim_wrapper : nullptr;
  ParsedLosses parsed = parse_losses(losses, group_, /*across_ranks=*/!joining_);
  if (options_.detect_anomalous_params) detect_anomalous_params(parsed.loss);
  optim_wrapper.update_params(parsed.loss);
  return parsed.log_vars;
}

void MMDistributedDataParallel::shadow_iteration(const JoinRound& round) {
  refuse_unshadowable_join();
  if (options_.broadcast_buffers) broadcast_buffers(module(), group_, round.authoritative_rank());
  if (round.synchronises) reducer_->shadow_backward(/*own_gradients=*/shadow_optim_ != nullptr);
  if (shadow_optim_) shadow_optim_->update_params_shadowed();
}

void MMDistributedDataParallel::finish_join(int last_rank) {
  broadcast_module_state(module(), group_, last_rank);
  shadow_optim_ = nullptr;
}

// Both are collectives a rank that joined has no way to match: a hook's own,
// and those of a synchronised BatchNorm's forward, which it does not run.
void MMDistributedDataParallel::refuse_unshadowable_join() {
  const int rank = group_->my_global_rank();
  if (reducer_->comm_hook()) {
    throw dist::InvalidArgument(
        dist::on_rank(rank, "Join: MMDistributedDataParallel with the communication hook " +
                                reducer_->comm_hook()->describe() +
                                " cannot shadow its collectives; join without a hook"));
  }
  if (const auto norm = find_sync_batchnorm(module())) {
    throw dist::InvalidArgument(dist::on_rank(
        rank,
        "Join: MMDistributedDataParallel cannot shadow the forward of the synchronised "
        "BatchNorm \"" +
            *norm +
            "\"; join under MMFullyShardedDataParallel (NO_SHARD trains as DDP does), "
            "or revert_sync_batchnorm"));
  }
}

void MMDistributedDataParallel::detect_anomalous_params(const at::Tensor& loss) {
  std::vector<at::Tensor> tensors;
  for (const auto& param : reducer_->parameters()) tensors.push_back(param.tensor);
  std::vector<bool> reached = reached_parameters({loss}, tensors);
  anomalous_params_.clear();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (reached[i]) continue;
    const NamedParameter& param = reducer_->parameters()[i];
    anomalous_params_.push_back(param.name);
    std::ostringstream shape;
    shape << param.tensor.sizes();
    std::cerr << dist::on_rank(group_->my_global_rank(),
                               "parameter \"" + param.name + "\" with shape " + shape.str() +
                                   " is not in the computational graph of the loss\n");
  }
}

}  // namespace engine::model
