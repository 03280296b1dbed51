#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace sim {

// The deterministic scheduler's choices, after PCT (Burckhardt et al.,
// "A randomized scheduler with probabilistic guarantees of finding bugs"):
// every rank gets a random priority from the seed, and at a few random steps
// the rank that was running drops below all others. At each scheduling point
// the runnable rank with the highest priority runs. Not thread-safe: the
// world's lock guards it.
class Schedule {
 public:
  Schedule(uint64_t seed, int size, int change_points = 3, uint64_t horizon = 400);

  // Counts a step and returns the rank to run among `runnable` (not empty);
  // `yielding` (-1: none) is the rank that gave up the core.
  int pick(const std::vector<int>& runnable, int yielding);

  void record(std::string event) { trace_.push_back(std::move(event)); }
  const std::vector<std::string>& trace() const { return trace_; }

 private:
  std::vector<int64_t> priority_;
  std::vector<uint64_t> change_steps_;
  uint64_t step_ = 0;
  int64_t lowest_ = 0;
  std::vector<std::string> trace_;
};

}  // namespace sim
