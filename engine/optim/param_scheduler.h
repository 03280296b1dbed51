#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace engine::optim {

// mmengine's MultiStepLR, stepped once per iteration: the learning rate of
// every parameter group is its initial value times gamma to the number of
// milestones already passed.
class MultiStepLR {
 public:
  MultiStepLR(torch::optim::Optimizer& optimizer, std::vector<int64_t> milestones, double gamma);

  // A scheduler on `optimizer` with these milestones, gamma and step count;
  // its base learning rates are `optimizer`'s own.
  std::shared_ptr<MultiStepLR> rebuilt_on(torch::optim::Optimizer& optimizer) const;

  void step();
  int64_t last_step() const { return last_step_; }
  double lr(size_t group = 0) const;

  // The scheduler's state for checkpoints: the step count (milestones and
  // gamma come from the config, as in mmengine).
  c10::IValue state() const;
  void load_state(const c10::IValue& state);

 private:
  void apply();

  torch::optim::Optimizer& optimizer_;
  std::vector<int64_t> milestones_;
  double gamma_;
  std::vector<double> base_lrs_;
  int64_t last_step_ = 0;
};

}  // namespace engine::optim
