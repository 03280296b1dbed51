#include "engine/optim/param_scheduler.h"

#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cmath>

#include "engine/dist/errors.h"

namespace engine::optim {

MultiStepLR::MultiStepLR(torch::optim::Optimizer& optimizer, std::vector<int64_t> milestones,
                         double gamma)
    : optimizer_(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  for (auto& group : optimizer_.param_groups()) base_lrs_.push_back(group.options().get_lr());
}

std::shared_ptr<MultiStepLR> MultiStepLR::rebuilt_on(torch::optim::Optimizer& optimizer) const {
  auto rebuilt = std::make_shared<MultiStepLR>(optimizer, milestones_, gamma_);
  rebuilt->load_state(state());
  return rebuilt;
}

void MultiStepLR::step() {
  ++last_step_;
  apply();
}

void MultiStepLR::apply() {
  const auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), last_step_) - milestones_.begin();
  const double factor = std::pow(gamma_, static_cast<double>(passed));
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(base_lrs_[i] * factor);
}

double MultiStepLR::lr(size_t group) const {
  return optimizer_.param_groups().at(group).options().get_lr();
}

c10::IValue MultiStepLR::state() const { return last_step_; }

void MultiStepLR::load_state(const c10::IValue& state) {
  if (!state.isInt() || state.toInt() < 0) {
    throw dist::InvalidArgument("MultiStepLR state must be a non-negative step count, got " +
                                state.tagKind());
  }
  last_step_ = state.toInt();
  apply();
}

}  // namespace engine::optim
