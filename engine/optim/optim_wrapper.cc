#include "engine/optim/optim_wrapper.h"

// clang-format off
// clip_grad.h uses torch::Tensor without including its declaration.
#include <torch/types.h>
#include <torch/nn/utils/clip_grad.h>
// clang-format on
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <cmath>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/optim/grad_norm.h"
#include "engine/optim/step_hook.h"

namespace engine::optim {
namespace {

void check_options(const OptimWrapperOptions& options) {
  if (options.accumulative_counts < 1) {
    throw dist::InvalidArgument(
        dist::on_rank(dist::get_rank(), "accumulative_counts must be at least 1, got " +
                                            std::to_string(options.accumulative_counts)));
  }
}

}  // namespace

OptimWrapper::OptimWrapper(std::shared_ptr<torch::optim::Optimizer> optimizer,
                           OptimWrapperOptions options)
    : optimizer_(std::move(optimizer)), options_(options) {
  check_options(options_);
  if (!optimizer_) {
    throw dist::InvalidArgument(dist::on_rank(dist::get_rank(), "OptimWrapper needs an optimizer"));
  }
}

std::vector<std::pair<std::string, double>> OptimWrapper::learning_rates() {
  return {{"lr", optimizer_->param_groups()[0].options().get_lr()}};
}

void OptimWrapper::initialize_count_status(int64_t init_counts, int64_t max_counts) {
  inner_count_ = init_counts;
  max_counts_ = max_counts;
}

void OptimWrapper::update_params(const at::Tensor& loss) {
  backward(scale_loss(loss));
  step_at_group_end();
}

void OptimWrapper::update_params_shadowed() {
  ++inner_count_;
  step_at_group_end();
}

void OptimWrapper::step_at_group_end() {
  if (!should_update()) return;
  step();
  zero_grad();
}

at::Tensor OptimWrapper::scale_loss(const at::Tensor& loss) const {
  const int64_t counts = options_.accumulative_counts;
  if (counts == 1) return loss;
  if (max_counts_ < 0) return loss / counts;
  const int64_t remainder = max_counts_ % counts;
  const bool in_full_group = inner_count_ < max_counts_ - remainder;
  return loss / (in_full_group ? counts : remainder);
}

void OptimWrapper::backward(const at::Tensor& loss) {
  loss.backward();
  ++inner_count_;
}

void OptimWrapper::step() {
  std::vector<StepHook*> hooks;
  for (const auto& group : optimizer_->param_groups()) {
    for (const auto& param : group.params()) {
      StepHook* hook = step_hook_of(param);
      if (hook && std::find(hooks.begin(), hooks.end(), hook) == hooks.end()) hooks.push_back(hook);
    }
  }
  for (StepHook* hook : hooks) hook->before_step();
  if (prepare_step()) {
    if (options_.clip_grad) clip_gradients();
    optimizer_->step();
  }
  for (StepHook* hook : hooks) hook->after_step();
}

// LibTorch 1.13's Optimizer::zero_grad detaches each gradient in place, which
// throws for gradients that are views (DDP's gradient_as_bucket_view); this
// zeroes them as Python's Optimizer.zero_grad does.
void OptimWrapper::zero_grad() {
  for (auto& group : optimizer_->param_groups()) {
    for (auto& param : group.params()) {
      at::Tensor& grad = param.mutable_grad();
      if (!grad.defined()) continue;
      if (grad.grad_fn()) {
        grad = grad.detach();
      }
      grad.requires_grad_(false);
      grad.zero_();
    }
  }
}

bool OptimWrapper::should_update() const {
  return inner_count_ % options_.accumulative_counts == 0 || inner_count_ == max_counts_;
}

bool OptimWrapper::should_sync() const {
  const int64_t next = inner_count_ + 1;
  return next % options_.accumulative_counts == 0 || next == max_counts_;
}

OptimContext OptimWrapper::optim_context(GradSyncSwitch* model) const {
  return OptimContext(should_sync() ? nullptr : model);
}

std::vector<at::Tensor> OptimWrapper::parameters_with_grad() const {
  std::vector<at::Tensor> with_grad;
  for (const auto& group : optimizer_->param_groups()) {
    for (const auto& param : group.params()) {
      if (param.requires_grad() && param.grad().defined()) with_grad.push_back(param);
    }
  }
  return with_grad;
}

void OptimWrapper::clip_gradients() {
  const std::vector<at::Tensor> with_grad = parameters_with_grad();
  if (with_grad.empty()) return;
  const ClipGrad& clip = *options_.clip_grad;
  if (clip.kind == ClipGrad::Kind::kNorm) {
    last_grad_norm_ = clip_by_global_norm(with_grad, clip);
  } else {
    torch::nn::utils::clip_grad_value_(with_grad, clip.clip_value);
  }
}

// torch's clip_grad_norm_ where every gradient is this rank's own; where a
// GradNormSource holds some, their share comes from it (a collective, in the
// order the sources first appear among the parameters, alike on every rank)
// and the parameters outside any source count as replicated: once.
double OptimWrapper::clip_by_global_norm(const std::vector<at::Tensor>& params,
                                         const ClipGrad& clip) {
  const GradsBySource by_source = group_by_source(params);
  if (by_source.sources.empty()) {
    // LibTorch's inf norm takes the max of each gradient, which an empty
    // one has not; empty gradients count for nothing in any norm.
    std::vector<at::Tensor> nonempty;
    for (const auto& param : params) {
      if (param.grad().numel() > 0) nonempty.push_back(param);
    }
    return torch::nn::utils::clip_grad_norm_(nonempty, clip.max_norm, clip.norm_type);
  }
  const bool infinite = std::isinf(clip.norm_type);
  double total = local_power_sum(by_source.local_grads, clip.norm_type);
  for (size_t i = 0; i < by_source.sources.size(); ++i) {
    const double share = by_source.sources[i]->global_power_sum(by_source.owned[i], clip.norm_type);
    total = infinite ? std::max(total, share) : total + share;
  }
  const double norm = infinite ? total : std::pow(total, 1.0 / clip.norm_type);
  const double coefficient = std::min(clip.max_norm / (norm + 1e-6), 1.0);
  for (const auto& param : params) param.grad().mul_(coefficient);
  return norm;
}

void OptimWrapper::save(torch::serialize::OutputArchive& archive) const {
  optimizer_->save(archive);
}

void OptimWrapper::load(torch::serialize::InputArchive& archive) { optimizer_->load(archive); }

c10::impl::GenericDict OptimWrapper::state() const {
  return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
}

void OptimWrapper::load_state(const c10::impl::GenericDict&) {}

}  // namespace engine::optim
