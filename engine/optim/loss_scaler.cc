#include "engine/optim/loss_scaler.h"

#include <cmath>
#include <string>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"

namespace engine::optim {
namespace {

void require(bool holds, const std::string& what) {
  if (!holds) throw dist::InvalidArgument(dist::on_rank(dist::get_rank(), "loss scaler: " + what));
}

}  // namespace

LossScaler::LossScaler(LossScalerOptions options)
    : options_(options), scale_(static_cast<float>(options.init_scale)) {
  require(std::isfinite(scale_) && scale_ > 0,
          "init_scale must be finite and positive in float32, got " +
              std::to_string(options.init_scale));
  require(options_.growth_interval >= 1,
          "growth_interval must be at least 1, got " + std::to_string(options_.growth_interval));
  if (!options_.dynamic) return;
  require(std::isfinite(options_.growth_factor) && options_.growth_factor > 1,
          "growth_factor must be above 1, got " + std::to_string(options_.growth_factor));
  require(options_.backoff_factor > 0 && options_.backoff_factor < 1,
          "backoff_factor must be in (0, 1), got " + std::to_string(options_.backoff_factor));
}

void LossScaler::update(bool found_inf) {
  if (!options_.dynamic) return;
  if (found_inf) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ < options_.growth_interval) return;
  const auto grown = static_cast<float>(scale_ * options_.growth_factor);
  if (std::isfinite(grown)) scale_ = grown;
  growth_tracker_ = 0;
}

void LossScaler::restore(double scale, int64_t growth_tracker) {
  const float restored = static_cast<float>(scale);
  require(std::isfinite(restored) && restored > 0,
          "a saved scale must be finite and positive in float32, got " + std::to_string(scale));
  require(growth_tracker >= 0,
          "a saved growth tracker must not be negative, got " + std::to_string(growth_tracker));
  scale_ = restored;
  growth_tracker_ = growth_tracker;
}

}  // namespace engine::optim
