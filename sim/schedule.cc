#include "sim/schedule.h"

#include <algorithm>
#include <numeric>

namespace sim {

Schedule::Schedule(uint64_t seed, int size, int change_points, uint64_t horizon) : priority_(size) {
  std::mt19937_64 rng(seed);
  std::iota(priority_.begin(), priority_.end(), int64_t{1});
  std::shuffle(priority_.begin(), priority_.end(), rng);
  std::uniform_int_distribution<uint64_t> step(1, horizon);
  for (int i = 0; i < change_points; ++i) change_steps_.push_back(step(rng));
}

int Schedule::pick(const std::vector<int>& runnable, int yielding) {
  ++step_;
  if (yielding >= 0 &&
      std::find(change_steps_.begin(), change_steps_.end(), step_) != change_steps_.end()) {
    priority_[yielding] = --lowest_;
  }
  return *std::max_element(runnable.begin(), runnable.end(),
                           [&](int a, int b) { return priority_[a] < priority_[b]; });
}

}  // namespace sim
