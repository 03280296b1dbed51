#pragma once

#include <chrono>
#include <climits>
#include <cstdint>

namespace sim {

// The simulator's virtual time, in milliseconds (WorldOptions::virtual_time,
// and deterministic runs). It stands still while any rank can go on; the
// world moves it to the next deadline or wake-up once none can, so that
// timeouts and delays cost no wall time. Not thread-safe: the world's lock
// guards it.
class VirtualClock {
 public:
  static constexpr int64_t kNever = INT64_MAX;

  explicit VirtualClock(bool enabled) : enabled_(enabled) {}

  // Whether waits and delays run on this clock rather than the wall clock.
  bool enabled() const { return enabled_; }
  // `delay` from now; kNever when that is past what the clock can hold.
  int64_t after(std::chrono::milliseconds delay) const {
    return delay.count() >= kNever - now_ms_ ? kNever : now_ms_ + delay.count();
  }
  // Enabled and at or past `at_ms`.
  bool reached(int64_t at_ms) const { return enabled_ && now_ms_ >= at_ms; }
  // Enabled and not yet at `at_ms`.
  bool before(int64_t at_ms) const { return enabled_ && now_ms_ < at_ms; }
  // Moves to `at_ms` when that is a time later than now; true if it moved.
  bool advance_to(int64_t at_ms) {
    if (at_ms == kNever || at_ms <= now_ms_) return false;
    now_ms_ = at_ms;
    return true;
  }

 private:
  bool enabled_;
  int64_t now_ms_ = 0;
};

}  // namespace sim
