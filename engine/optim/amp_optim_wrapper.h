#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <memory>
#include <optional>

#include "engine/optim/loss_scaler.h"
#include "engine/optim/optim_wrapper.h"

namespace engine::optim {

struct AmpOptions {
  // The forward's lower precision: float16 (CUDA only) or bfloat16.
  c10::ScalarType dtype = c10::kHalf;
  // nullopt: the loss is not scaled (bfloat16 has float32's range; the
  // config builder leaves it unscaled unless "loss_scale" is given).
  std::optional<LossScalerOptions> loss_scaler = LossScalerOptions{};
};

// mmengine's AmpOptimWrapper: optim_context also opens autocast in
// options.dtype on the parameters' device, so the forward computes in lower
// precision what autocast casts (matrix products, convolutions) and the
// parameters and their gradients stay in their own dtype. backward() runs
// with autocast off, on the loss in float32 times the scale. step() first
// divides the gradients by the scale and looks for an inf or a NaN in them,
// over every rank that holds a part of them (engine/optim/grad_norm.h: a
// sharding wrapper's ranks decide together, so that no shard steps alone);
// if any rank found one, no rank clips or steps and the scale backs off,
// else the step runs and the scale may grow (LossScaler). Unlike mmengine's,
// it runs on the CPU (bfloat16), and leaves bfloat16 unscaled by default.
class AmpOptimWrapper : public OptimWrapper {
 public:
  // InvalidArgument if dtype is neither float16 nor bfloat16, float16 on
  // CPU parameters, or the optimizer's parameters are on neither the CPU
  // nor CUDA, or a loss scaler option is out of range.
  AmpOptimWrapper(std::shared_ptr<torch::optim::Optimizer> optimizer,
                  OptimWrapperOptions options = {}, AmpOptions amp = {});

  void backward(const at::Tensor& loss) override;
  OptimContext optim_context(GradSyncSwitch* model) const override;

  const AmpOptions& amp_options() const { return amp_; }
  // nullptr when the loss is not scaled.
  const LossScaler* loss_scaler() const { return scaler_ ? &*scaler_ : nullptr; }
  // Whether the last step() skipped the optimizer for an overflow.
  bool last_step_skipped() const { return last_step_skipped_; }

  // {"loss_scaler": GradScaler's state_dict: scale, growth_factor,
  // backoff_factor, growth_interval, _growth_tracker} when scaling.
  // load_state takes the scale and the tracker, keeping this wrapper's
  // factors and interval, as mmengine's config overrides a resumed one.
  c10::impl::GenericDict state() const override;
  void load_state(const c10::impl::GenericDict& saved) override;

 protected:
  bool prepare_step() override;

 private:
  AmpOptions amp_;
  c10::DeviceType device_;
  std::optional<LossScaler> scaler_;
  bool last_step_skipped_ = false;
};

}  // namespace engine::optim
