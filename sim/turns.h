#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/schedule.h"

namespace sim {

// The turns of a deterministic run (WorldOptions::deterministic): one rank
// runs at a time, and at each scheduling point the schedule picks the next
// among those that can go on; the trace records every point. Disabled, no
// rank ever waits for a turn. Not thread-safe: the world's lock guards it.
class Turns {
 public:
  Turns(bool enabled, uint64_t seed, int size) {
    if (enabled) schedule_.emplace(seed, size);
  }

  bool enabled() const { return schedule_.has_value(); }
  bool held_by(int rank) const { return turn_ == rank; }
  // No rank holds the turn: none has run yet, or every one has finished.
  bool unheld() const { return turn_ < 0; }

  // Enabled: logs that `rank` reached `event`.
  void record(int rank, const std::string& event) {
    schedule_->record("rank " + std::to_string(rank) + " " + event);
  }
  // Enabled: gives the turn to one of `runnable` (not empty); `yielding`
  // (-1: none) is the rank that gave it up.
  void give(const std::vector<int>& runnable, int yielding) {
    turn_ = schedule_->pick(runnable, yielding);
  }
  void give_up() { turn_ = -1; }

  std::vector<std::string> trace() const {
    return schedule_ ? schedule_->trace() : std::vector<std::string>{};
  }

 private:
  std::optional<Schedule> schedule_;
  int turn_ = -1;
};

}  // namespace sim
