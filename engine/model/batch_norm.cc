#include "engine/model/batch_norm.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/batch_norm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/nn/modules/batchnorm.h>

#include "engine/compat/autograd.h"
#include "engine/dist/collectives.h"
#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/model/join/join.h"

namespace engine::model {
namespace {

using torch::autograd::variable_list;

// Every dimension but the channel dimension 1.
std::vector<int64_t> reduced_dims(const at::Tensor& input) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// [C] -> [1, C, 1, ...] to broadcast against the input.
at::Tensor per_channel(const at::Tensor& values, const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = values.size(0);
  return values.view(shape);
}

struct GroupStatistics {
  at::Tensor mean;   // [C], float64
  at::Tensor var;    // biased, [C], float64
  double count = 0;  // samples per channel over the group
};

// A rank shadowing the others' iteration under a Join counts as a rank
// without samples: it is normalised with their statistics and adds none.
GroupStatistics group_statistics(const at::Tensor& input, const dist::GroupPtr& group) {
  const auto dims = reduced_dims(input);
  const int64_t channels = input.size(1);
  const double weight = shadowing() ? 0.0 : 1.0;
  at::Tensor sums =
      at::cat({input.sum(dims, false, at::kDouble) * weight,
               at::full({1}, weight * double(input.numel() / std::max<int64_t>(channels, 1)),
                        input.options().dtype(at::kDouble))});
  dist::all_reduce(sums, "sum", group);
  GroupStatistics stats;
  stats.count = sums[channels].item<double>();
  if (stats.count < 2) {
    throw dist::InvalidArgument(
        dist::on_rank(group->my_global_rank(),
                      "SyncBatchNorm needs more than one value per channel over the "
                      "group's batch in training, got " +
                          std::to_string(int64_t(stats.count))));
  }
  stats.mean = sums.narrow(0, 0, channels) / stats.count;
  at::Tensor centred = input.to(at::kDouble) - per_channel(stats.mean, input);
  at::Tensor squares = (centred * centred).sum(dims) * weight;
  dist::all_reduce(squares, "sum", group);
  stats.var = squares / stats.count;
  return stats;
}

// The backward of a synchronised batch norm: the input gradient needs the
// group's sums of dy and dy * x_hat.
struct SyncBatchNormBackward : public torch::autograd::Node {
  dist::GroupPtr group;
  at::Tensor x_hat, invstd, weight;  // x_hat and invstd in the input's dtype
  double count = 0;

  variable_list apply(variable_list&& grads) override {
    const at::Tensor& dy = grads[0];
    const auto dims = reduced_dims(dy);
    const int64_t channels = dy.size(1);
    at::Tensor sum_dy = dy.sum(dims);
    at::Tensor sum_dy_xhat = (dy * x_hat).sum(dims);
    at::Tensor packed = at::cat({sum_dy, sum_dy_xhat});
    dist::all_reduce(packed, "sum", group);
    at::Tensor mean_dy = per_channel(packed.narrow(0, 0, channels) / count, dy);
    at::Tensor mean_dy_xhat = per_channel(packed.narrow(0, channels, channels) / count, dy);
    at::Tensor scale = per_channel(weight.defined() ? invstd * weight : invstd, dy);
    at::Tensor grad_input = scale * (dy - mean_dy - x_hat * mean_dy_xhat);
    if (!weight.defined()) return {grad_input, at::Tensor(), at::Tensor()};
    return {grad_input, sum_dy_xhat, sum_dy};
  }
};

}  // namespace

BatchNormImpl::BatchNormImpl(BatchNormOptions options) : options_(options) {
  const int64_t c = options_.num_features;
  if (options_.affine) {
    weight = register_parameter("weight", at::ones({c}));
    bias = register_parameter("bias", at::zeros({c}));
  }
  if (options_.track_running_stats) {
    running_mean = register_buffer("running_mean", at::zeros({c}));
    running_var = register_buffer("running_var", at::ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
  }
}

at::Tensor BatchNormImpl::forward(const at::Tensor& input) {
  if (input.dim() < 2 || input.size(1) != options_.num_features) {
    throw dist::InvalidArgument(dist::on_rank(
        dist::get_rank(), "BatchNorm expects input [N, " + std::to_string(options_.num_features) +
                              ", ...], got " + c10::str(input.sizes())));
  }
  const bool batch_stats = is_training() || !options_.track_running_stats;
  if (is_training() && options_.track_running_stats) {
    c10::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  if (batch_stats) {
    dist::GroupPtr group = sync_group();
    if (group && group->size() > 1) return forward_synchronised(input, group);
  }
  // Parameters and buffers of one dtype take any input (ATen's kernel mixes
  // a bfloat16 or float16 input, as autocast gives, with float32 ones).
  if (!running_mean.defined() || running_mean.scalar_type() == input.scalar_type() ||
      !weight.defined() || weight.scalar_type() == running_mean.scalar_type()) {
    return at::batch_norm(input, weight, bias, running_mean, running_var, batch_stats,
                          options_.momentum, options_.eps, false);
  }
  // Buffers in another dtype than the input (mixed precision's
  // buffer_dtype): ATen's kernel takes one dtype, so it updates copies.
  at::Tensor mean = running_mean.to(input.scalar_type());
  at::Tensor var = running_var.to(input.scalar_type());
  at::Tensor output = at::batch_norm(input, weight, bias, mean, var, batch_stats, options_.momentum,
                                     options_.eps, false);
  if (is_training() && options_.track_running_stats) {
    c10::NoGradGuard no_grad;
    running_mean.copy_(mean);
    running_var.copy_(var);
  }
  return output;
}

void BatchNormImpl::synchronise(dist::GroupPtr group) { sync_with_ = std::move(group); }

void BatchNormImpl::desynchronise() { sync_with_.reset(); }

dist::GroupPtr BatchNormImpl::sync_group() const {
  if (!sync_with_) return nullptr;
  return *sync_with_ ? *sync_with_ : dist::get_default_group();
}

at::Tensor BatchNormImpl::forward_synchronised(const at::Tensor& input,
                                               const dist::GroupPtr& group) {
  GroupStatistics stats = group_statistics(input.detach(), group);
  if (is_training() && options_.track_running_stats) {
    c10::NoGradGuard no_grad;
    const double m = options_.momentum;
    running_mean.mul_(1 - m).add_(stats.mean.to(running_mean.scalar_type()), m);
    at::Tensor unbiased = stats.var * (stats.count / (stats.count - 1));
    running_var.mul_(1 - m).add_(unbiased.to(running_var.scalar_type()), m);
  }
  at::Tensor invstd = (stats.var + options_.eps).rsqrt().to(input.scalar_type());
  at::Tensor mean = stats.mean.to(input.scalar_type());
  at::Tensor x_hat = (input.detach() - per_channel(mean, input)) * per_channel(invstd, input);
  at::Tensor output;
  {
    c10::NoGradGuard no_grad;
    output = weight.defined()
                 ? x_hat * per_channel(weight.detach(), input) + per_channel(bias.detach(), input)
                 : x_hat.clone();
  }
  const bool needs_grad = at::GradMode::is_enabled() &&
                          (input.requires_grad() || (weight.defined() && weight.requires_grad()) ||
                           (bias.defined() && bias.requires_grad()));
  if (!needs_grad) return output;
  auto node = compat::make_node<SyncBatchNormBackward>();
  node->group = group;
  node->x_hat = x_hat;
  node->invstd = invstd;
  node->weight = weight.defined() ? weight.detach() : at::Tensor();
  node->count = stats.count;
  node->set_next_edges(torch::autograd::collect_next_edges(input, weight, bias));
  torch::autograd::set_history(output, node);
  return output;
}

BatchNorm SyncBatchNorm(BatchNormOptions options, dist::GroupPtr group) {
  BatchNorm module(options);
  module->synchronise(std::move(group));
  return module;
}

namespace {

bool is_stock_batch_norm(const torch::nn::Module& module) {
  return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&module) != nullptr;
}

// Calls `apply` on every engine BatchNorm of the tree; returns how many.
template <typename Apply>
int for_each_batch_norm(torch::nn::Module& module, Apply apply) {
  int count = 0;
  for (const auto& item : module.named_modules()) {
    if (auto* norm = dynamic_cast<BatchNormImpl*>(item.value().get())) {
      apply(*norm);
      ++count;
    }
  }
  return count;
}

}  // namespace

int convert_sync_batchnorm(torch::nn::Module& module, dist::GroupPtr group) {
  std::string stock;
  for (const auto& item : module.named_modules()) {
    if (is_stock_batch_norm(*item.value())) stock += (stock.empty() ? "" : ", ") + item.key();
  }
  if (!stock.empty()) {
    throw dist::InvalidArgument(dist::on_rank(
        dist::get_rank(), "convert_sync_batchnorm cannot switch torch::nn::BatchNorm layers (" +
                              stock +
                              "): a C++ parent calls them through typed members. Build those "
                              "layers as engine::model::BatchNorm (same options and state)"));
  }
  return for_each_batch_norm(module, [&](BatchNormImpl& norm) { norm.synchronise(group); });
}

int revert_sync_batchnorm(torch::nn::Module& module) {
  return for_each_batch_norm(module, [](BatchNormImpl& norm) { norm.desynchronise(); });
}

std::optional<std::string> find_sync_batchnorm(const torch::nn::Module& module) {
  for (const auto& item : module.named_modules()) {
    const auto* norm = dynamic_cast<const BatchNormImpl*>(item.value().get());
    if (norm != nullptr && norm->is_sync()) return item.key();
  }
  return std::nullopt;
}

}  // namespace engine::model
