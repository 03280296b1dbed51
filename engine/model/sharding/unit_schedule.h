#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <vector>

namespace engine::model::sharding {

// PyTorch's BackwardPrefetch: when the next unit's all-gather is issued
// during backward, the next unit being the nearest one before in this
// iteration's forward order whose backward has not begun.
//   kBackwardPre   as a unit's backward begins, before its gradients are
//                  computed (the most overlap; holds two units)
//   kBackwardPost  once a unit's gradients are all computed and it is freed
//   kNone          each unit gathered only when its backward needs it
enum class BackwardPrefetch { kNone, kBackwardPre, kBackwardPost };

// The moves of FSDP's units that the schedule orders, by unit index. Each
// that issues a collective must issue it on every rank of the unit's group.
class UnitMoves {
 public:
  virtual ~UnitMoves() = default;
  // Makes the unit whole, waiting for a gather start_gather began.
  virtual void gather(size_t unit) = 0;
  // Begins the unit's all-gather and returns without waiting for it.
  virtual void start_gather(size_t unit) = 0;
  // Whether the unit is whole or its gather has begun.
  virtual bool gather_started(size_t unit) const = 0;
  // Frees the unit's whole parameters; a no-op where it holds none.
  virtual void reshard(size_t unit) = 0;
  // Begins the reduce-scatter of the unit's gradients.
  virtual void launch_reduction(size_t unit) = 0;
  // Waits for the reduce-scatter launch_reduction began.
  virtual void await_reduction(size_t unit) = 0;
};

struct ScheduledUnit {
  size_t trainable = 0;     // its parameters that require grad
  bool has_frozen = false;  // some parameter of it does not
  // The model runs it through call_unit; false for the ignored modules'
  // unit, which nothing calls.
  bool called = true;
};

struct ScheduleOptions {
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;
  bool forward_prefetch = false;
  // A prefetch waits while two units other than the root are gathered for
  // use.
  bool limit_all_gathers = true;
  // FULL_SHARD and HYBRID_SHARD: a unit is freed after its forward and
  // gathered again for its backward; otherwise it stays whole from its
  // forward to the end of backward.
  bool reshard_after_forward = true;
};

// When FSDP's units gather, free and reduce, decided from the order of the
// model's calls alone: ranks that run the same units in the same order make
// the same collective moves in the same order, whichever parameters each
// rank's batch reaches. Unit 0 is the root: gathered from the start of a
// forward to the end of its backward, never prefetched.
//
// One iteration: begin_forward; enter and leave around each call of a unit;
// end_forward; then, in backward, begin_backward (the first backward event
// of any kind), pre_backward as a unit's output gradient arrives and
// grad_ready as each of its parameters' gradients does; finish_backward;
// reshard_all. A forward without backward ends with reshard_all.
//
// Reductions launch in launch_order() (reverse unit order), each once all
// the unit's parameters that the batch reached have their gradients and its
// backward has begun where its output awaits one (so that a rank whose batch
// reached none of a unit's parameters launches it where the others do); at
// most kReductionsInFlight stay unawaited. Not thread-safe: autograd's
// hooks of one backward run on one thread.
class UnitSchedule {
 public:
  // Reduce-scatters left running before the oldest is awaited: a backward
  // that outruns the network otherwise holds every unit's packed gradients
  // until its end, where PyTorch's FSDP frees each as its reduce-scatter
  // ends.
  static constexpr size_t kReductionsInFlight = 1;

  UnitSchedule(std::vector<ScheduledUnit> units, ScheduleOptions options, UnitMoves& moves);

  // Gathers the root and every called unit that has never been entered,
  // whose parameters the forward may read directly.
  void begin_forward(bool will_backward);
  // Before a unit's call: the unit whole, and with forward_prefetch, while
  // this forward follows the previous one's order, the gather of the unit
  // that came next then begun. A departure from that order frees what was
  // prefetched for it.
  void enter(size_t unit);
  // After a unit's call whose output requires grad (or not): frees the unit
  // unless it is kept for backward. Returns whether the unit awaits a
  // backward; pre_backward(unit) is then due when its output's gradient
  // arrives.
  bool leave(size_t unit, bool output_requires_grad);
  // Frees what was prefetched and not used.
  void end_forward();

  // Begins backward unless it has begun; returns whether this call began
  // it. `unreached`: per unit, the trainable parameters the forward's
  // outputs do not reach, which count as ready from the start; `reduce`:
  // reductions launch as units become ready (else none before
  // finish_backward).
  bool begin_backward(const std::vector<size_t>& unreached, bool reduce);
  // The unit's backward begins: it is whole again, and with kBackwardPre
  // the next unit's gather begins.
  void pre_backward(size_t unit);
  // One of the unit's trainable parameters has its gradient.
  void grad_ready(size_t unit);
  // Ends backward; with `reduce`, launches every reduction not launched
  // yet, in launch order (the caller then awaits them all).
  void finish_backward(bool reduce);
  bool in_backward() const { return in_backward_; }

  // Frees every unit.
  void reshard_all();

  const std::vector<size_t>& launch_order() const { return launch_order_; }
  const ScheduledUnit& unit(size_t index) const { return units_[index]; }

 private:
  void complete(size_t unit);
  bool launchable(size_t unit) const;
  void launch_ready();
  void prefetch(std::optional<size_t> unit);
  size_t gathered_for_use() const;
  void drop_unused_prefetches();
  std::optional<size_t> next_backward_unit(size_t unit) const;

  std::vector<ScheduledUnit> units_;
  ScheduleOptions options_;
  UnitMoves& moves_;
  std::vector<size_t> launch_order_;
  std::vector<bool> entered_;  // called at least once, in any forward
  // The units this forward and the previous one called, in the order of
  // their first calls, and whether this one has followed the previous one
  // so far.
  std::vector<size_t> forward_order_;
  std::vector<size_t> previous_order_;
  bool order_as_before_ = true;
  bool will_backward_ = false;
  // Per unit: a prefetch began its gather and no call used it yet; its
  // backward is due and has not begun; it stays whole from its forward to
  // the end of backward.
  std::vector<bool> prefetched_;
  std::vector<bool> awaiting_backward_;
  std::vector<bool> kept_for_backward_;
  // Backward: per unit, the gradients still to come; whether it completed;
  // the next launch; the reductions launched and not awaited.
  bool in_backward_ = false;
  bool reduce_ = false;
  std::vector<size_t> pending_grads_;
  std::vector<bool> completed_;
  size_t next_launch_ = 0;
  std::deque<size_t> in_flight_;
};

}  // namespace engine::model::sharding
