#include "engine/optim/amp_optim_wrapper.h"

#include <torch/optim/optimizer.h>

#include <string>

#include "engine/compat/autocast.h"
#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/optim/grad_norm.h"

namespace engine::optim {
namespace {

[[noreturn]] void refuse_for_amp(const std::string& what) {
  throw dist::InvalidArgument(dist::on_rank(dist::get_rank(), "AmpOptimWrapper: " + what));
}

c10::DeviceType device_of(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) return param.device().type();
  }
  return c10::DeviceType::CPU;
}

c10::DeviceType checked_device(const torch::optim::Optimizer& optimizer, c10::ScalarType dtype) {
  if (dtype != c10::kHalf && dtype != c10::kBFloat16) {
    refuse_for_amp(std::string("dtype must be float16 or bfloat16, got ") + c10::toString(dtype));
  }
  const c10::DeviceType device = device_of(optimizer);
  if (device != c10::DeviceType::CPU && device != c10::DeviceType::CUDA) {
    refuse_for_amp("autocast runs on CPU or CUDA parameters, not on " +
                   c10::DeviceTypeName(device));
  }
  if (device == c10::DeviceType::CPU && dtype == c10::kHalf) {
    refuse_for_amp(
        "float16 autocast needs CUDA parameters; on the CPU use bfloat16 (with loss_scale "
        "to scale it anyway)");
  }
  return device;
}

double number(const c10::impl::GenericDict& dict, const std::string& key) {
  if (!dict.contains(key) || !(dict.at(key).isDouble() || dict.at(key).isInt()))
    refuse_for_amp("the saved loss_scaler has no number \"" + key + "\"");
  return dict.at(key).toScalar().toDouble();
}

}  // namespace

AmpOptimWrapper::AmpOptimWrapper(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                 OptimWrapperOptions options, AmpOptions amp)
    : OptimWrapper(std::move(optimizer), options),
      amp_(amp),
      device_(checked_device(this->optimizer(), amp.dtype)) {
  if (amp_.loss_scaler) scaler_.emplace(*amp_.loss_scaler);
}

void AmpOptimWrapper::backward(const at::Tensor& loss) {
  compat::AutocastScope no_autocast(device_, /*enabled=*/false);
  if (!scaler_) return OptimWrapper::backward(loss);
  OptimWrapper::backward(loss.to(at::kFloat) * scaler_->scale());
}

OptimContext AmpOptimWrapper::optim_context(GradSyncSwitch* model) const {
  return OptimContext(should_sync() ? nullptr : model, device_, amp_.dtype);
}

bool AmpOptimWrapper::prepare_step() {
  last_step_skipped_ = false;
  if (!scaler_) return true;
  const std::vector<at::Tensor> params = parameters_with_grad();
  // GradScaler's unscale: times the float32 reciprocal of the scale.
  const auto inverse = static_cast<float>(1.0 / static_cast<double>(scaler_->scale()));
  for (const auto& param : params) param.grad().mul_(inverse);
  last_step_skipped_ = any_non_finite_gradient(params);
  scaler_->update(last_step_skipped_);
  return !last_step_skipped_;
}

c10::impl::GenericDict AmpOptimWrapper::state() const {
  c10::impl::GenericDict out = OptimWrapper::state();
  if (!scaler_) return out;
  c10::impl::GenericDict scaler(c10::StringType::get(), c10::AnyType::get());
  scaler.insert("scale", static_cast<double>(scaler_->scale()));
  scaler.insert("growth_factor", scaler_->options().growth_factor);
  scaler.insert("backoff_factor", scaler_->options().backoff_factor);
  scaler.insert("growth_interval", scaler_->options().growth_interval);
  scaler.insert("_growth_tracker", scaler_->growth_tracker());
  out.insert("loss_scaler", scaler);
  return out;
}

void AmpOptimWrapper::load_state(const c10::impl::GenericDict& saved) {
  if (!scaler_ || !saved.contains("loss_scaler")) return;
  if (!saved.at("loss_scaler").isGenericDict())
    refuse_for_amp("the saved loss_scaler is not a dict");
  const c10::impl::GenericDict scaler = saved.at("loss_scaler").toGenericDict();
  const double tracker = number(scaler, "_growth_tracker");
  if (!scaler.at("_growth_tracker").isInt())
    refuse_for_amp("the saved _growth_tracker is not an integer");
  scaler_->restore(number(scaler, "scale"), static_cast<int64_t>(tracker));
}

}  // namespace engine::optim
