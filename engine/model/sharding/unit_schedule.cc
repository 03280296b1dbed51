#include "engine/model/sharding/unit_schedule.h"

#include <algorithm>

namespace engine::model::sharding {

UnitSchedule::UnitSchedule(std::vector<ScheduledUnit> units, ScheduleOptions options,
                           UnitMoves& moves)
    : units_(std::move(units)), options_(options), moves_(moves) {
  const size_t count = units_.size();
  for (size_t u = count; u-- > 0;) launch_order_.push_back(u);
  entered_.assign(count, false);
  prefetched_.assign(count, false);
  awaiting_backward_.assign(count, false);
  kept_for_backward_.assign(count, false);
  completed_.assign(count, false);
  pending_grads_.assign(count, 0);
}

void UnitSchedule::begin_forward(bool will_backward) {
  will_backward_ = will_backward;
  previous_order_ = std::move(forward_order_);
  forward_order_.clear();
  order_as_before_ = true;
  std::fill(awaiting_backward_.begin(), awaiting_backward_.end(), false);
  for (size_t u = 0; u < units_.size(); ++u) {
    if (u == 0 || (units_[u].called && !entered_[u])) moves_.gather(u);
  }
}

void UnitSchedule::enter(size_t unit) {
  entered_[unit] = true;
  if (std::find(forward_order_.begin(), forward_order_.end(), unit) == forward_order_.end()) {
    const size_t position = forward_order_.size();
    forward_order_.push_back(unit);
    if (order_as_before_) {
      order_as_before_ = position < previous_order_.size() && previous_order_[position] == unit;
      if (!order_as_before_) drop_unused_prefetches();
    }
  }
  moves_.gather(unit);
  prefetched_[unit] = false;
  if (options_.forward_prefetch && order_as_before_ &&
      forward_order_.size() < previous_order_.size()) {
    prefetch(previous_order_[forward_order_.size()]);
  }
}

bool UnitSchedule::leave(size_t unit, bool output_requires_grad) {
  const bool awaits = will_backward_ && output_requires_grad;
  if (awaits) awaiting_backward_[unit] = true;
  if (!will_backward_ || options_.reshard_after_forward) {
    moves_.reshard(unit);
  } else {
    kept_for_backward_[unit] = true;
  }
  return awaits;
}

void UnitSchedule::end_forward() {
  will_backward_ = false;
  drop_unused_prefetches();
}

bool UnitSchedule::begin_backward(const std::vector<size_t>& unreached, bool reduce) {
  if (in_backward_) return false;
  in_backward_ = true;
  reduce_ = reduce;
  for (size_t u = 0; u < units_.size(); ++u) {
    pending_grads_[u] = units_[u].trainable - (u < unreached.size() ? unreached[u] : 0);
  }
  std::fill(completed_.begin(), completed_.end(), false);
  next_launch_ = 0;
  in_flight_.clear();
  if (reduce_) launch_ready();
  return true;
}

void UnitSchedule::pre_backward(size_t unit) {
  awaiting_backward_[unit] = false;
  moves_.gather(unit);
  prefetched_[unit] = false;
  if (options_.backward_prefetch == BackwardPrefetch::kBackwardPre) {
    prefetch(next_backward_unit(unit));
  }
  if (pending_grads_[unit] == 0 && !completed_[unit]) complete(unit);
}

void UnitSchedule::grad_ready(size_t unit) {
  if (--pending_grads_[unit] == 0 && !awaiting_backward_[unit]) complete(unit);
}

// A frozen parameter's saved values may still be read by a later node of
// this backward: such a unit is freed at the end.
void UnitSchedule::complete(size_t unit) {
  completed_[unit] = true;
  if (unit != 0 && !units_[unit].has_frozen) moves_.reshard(unit);
  if (options_.backward_prefetch == BackwardPrefetch::kBackwardPost) {
    prefetch(next_backward_unit(unit));
  }
  if (reduce_) launch_ready();
}

// A unit whose output awaits its backward is not ready before that
// backward begins, even where this rank's batch reached none of its
// parameters: a rank whose batch reached them gathers the unit for that
// backward first, and the reductions would otherwise interleave with the
// gathers in another order on each rank.
bool UnitSchedule::launchable(size_t unit) const {
  return pending_grads_[unit] == 0 && !awaiting_backward_[unit];
}

void UnitSchedule::launch_ready() {
  while (next_launch_ < launch_order_.size() && launchable(launch_order_[next_launch_])) {
    const size_t unit = launch_order_[next_launch_++];
    if (units_[unit].trainable == 0) continue;
    moves_.launch_reduction(unit);
    in_flight_.push_back(unit);
    while (in_flight_.size() > kReductionsInFlight) {
      moves_.await_reduction(in_flight_.front());
      in_flight_.pop_front();
    }
  }
}

void UnitSchedule::finish_backward(bool reduce) {
  in_backward_ = false;
  if (!reduce) return;
  std::fill(pending_grads_.begin(), pending_grads_.end(), 0);
  std::fill(awaiting_backward_.begin(), awaiting_backward_.end(), false);
  launch_ready();
}

void UnitSchedule::reshard_all() {
  for (size_t u = 0; u < units_.size(); ++u) moves_.reshard(u);
  std::fill(prefetched_.begin(), prefetched_.end(), false);
  std::fill(kept_for_backward_.begin(), kept_for_backward_.end(), false);
}

// Every rank decides alike: from the order of calls, which every rank
// shares, and from which units are gathered, which follows from it.
void UnitSchedule::prefetch(std::optional<size_t> unit) {
  if (!unit || moves_.gather_started(*unit)) return;
  if (options_.limit_all_gathers && gathered_for_use() >= 2) return;
  moves_.start_gather(*unit);
  prefetched_[*unit] = true;
}

size_t UnitSchedule::gathered_for_use() const {
  size_t count = 0;
  for (size_t u = 1; u < units_.size(); ++u) {
    count += moves_.gather_started(u) && !kept_for_backward_[u];
  }
  return count;
}

void UnitSchedule::drop_unused_prefetches() {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!prefetched_[u]) continue;
    moves_.reshard(u);
    prefetched_[u] = false;
  }
}

// Backward runs the units in the reverse of this forward's order: the
// nearest unit before `unit` whose backward is still to begin.
std::optional<size_t> UnitSchedule::next_backward_unit(size_t unit) const {
  auto position = std::find(forward_order_.begin(), forward_order_.end(), unit);
  if (position == forward_order_.end()) return std::nullopt;  // the root
  while (position != forward_order_.begin()) {
    --position;
    if (awaiting_backward_[*position]) return *position;
  }
  return std::nullopt;
}

}  // namespace engine::model::sharding
