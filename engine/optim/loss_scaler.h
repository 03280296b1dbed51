#pragma once

#include <cstdint>

namespace engine::optim {

// PyTorch's GradScaler settings and defaults. Dynamic: the scale halves
// (backoff_factor) at every step whose gradients overflow and doubles
// (growth_factor) after growth_interval steps in a row without; static
// (dynamic false): it stays init_scale, and overflowing steps are still
// skipped (mmengine's numeric loss_scale).
struct LossScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool dynamic = true;
};

// The scale of a loss scaler and how it moves, without the tensors it
// scales: OptimWrapper multiplies the loss by scale() and divides the
// gradients by it. The scale is a float32 value, as GradScaler's is, so that
// its products round alike.
class LossScaler {
 public:
  // InvalidArgument unless init_scale is finite and positive in float32 and
  // growth_interval >= 1, and, when dynamic, growth_factor > 1 (finite) and
  // 0 < backoff_factor < 1.
  explicit LossScaler(LossScalerOptions options = {});

  float scale() const { return scale_; }
  // Successful steps since the scale last moved.
  int64_t growth_tracker() const { return growth_tracker_; }
  const LossScalerOptions& options() const { return options_; }

  // After a step: found_inf says whether its gradients overflowed (and so
  // whether the step was skipped). A grown scale that would not be finite
  // stays where it is, as GradScaler's does.
  void update(bool found_inf);

  // Resume: InvalidArgument if the scale is not finite and positive in
  // float32 or the tracker is negative. A tracker at or past this scaler's
  // growth_interval (saved under a longer one) grows at the next good step.
  void restore(double scale, int64_t growth_tracker);

 private:
  LossScalerOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
};

}  // namespace engine::optim
