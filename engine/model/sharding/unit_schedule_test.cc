#include "engine/model/sharding/unit_schedule.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace engine::model::sharding {
namespace {

// One forward and its backward as a rank runs them: the units called (each
// once, in order), whether each call's output requires grad, and per unit
// how many of its trainable parameters the rank's batch reaches.
struct Iteration {
  bool will_backward = true;
  bool reduce = true;
  std::vector<size_t> calls;
  std::vector<bool> output_requires_grad;    // per call
  std::vector<std::vector<size_t>> reached;  // [rank][unit]
};

struct Case {
  std::vector<ScheduledUnit> units;
  ScheduleOptions options;
  std::vector<Iteration> iterations;
};

constexpr int kRanks = 2;

void showValue(const Case& c, std::ostream& os) {
  os << "units (trainable, frozen, called):";
  for (const auto& unit : c.units) {
    os << " (" << unit.trainable << ", " << unit.has_frozen << ", " << unit.called << ")";
  }
  os << "\nbackward_prefetch " << static_cast<int>(c.options.backward_prefetch)
     << ", forward_prefetch " << c.options.forward_prefetch << ", limit_all_gathers "
     << c.options.limit_all_gathers << ", reshard_after_forward "
     << c.options.reshard_after_forward;
  for (const Iteration& it : c.iterations) {
    os << "\nbackward " << it.will_backward << ", reduce " << it.reduce << ", calls";
    for (size_t call = 0; call < it.calls.size(); ++call) {
      os << " " << it.calls[call] << (it.output_requires_grad[call] ? "" : "(no grad)");
    }
    for (const auto& reached : it.reached) {
      os << "; reached";
      for (size_t count : reached) os << " " << count;
    }
  }
}

// The units as the schedule moves them, checking each move as it comes,
// with the collectives in the order this rank issues them and, between
// them, where each unit's backward begins (a point every rank's autograd
// passes in the same order).
class FakeUnits : public UnitMoves {
 public:
  FakeUnits(const Case& c) : c_(c), units_(c.units.size()) {}

  void gather(size_t unit) override {
    if (!units_[unit].whole && !units_[unit].gathering) log_.push_back("AG" + std::to_string(unit));
    units_[unit] = {.whole = true, .gathering = false};
  }
  void start_gather(size_t unit) override {
    RC_ASSERT(!gather_started(unit));
    if (c_.options.limit_all_gathers && c_.options.reshard_after_forward) {
      RC_ASSERT(gathered_besides_root() < 2u);
    }
    log_.push_back("AG" + std::to_string(unit));
    units_[unit].gathering = true;
  }
  bool gather_started(size_t unit) const override {
    return units_[unit].whole || units_[unit].gathering;
  }
  void reshard(size_t unit) override { units_[unit] = {}; }
  void launch_reduction(size_t unit) override {
    RC_ASSERT(c_.units[unit].trainable > 0u);
    RC_ASSERT(grads_[unit] == reached_[unit]);
    log_.push_back("RS" + std::to_string(unit));
    launched_.push_back(unit);
    ++unawaited_;
  }
  void await_reduction(size_t) override {
    RC_ASSERT(unawaited_ > 0u);
    --unawaited_;
  }

  void begin_iteration(const std::vector<size_t>& reached) {
    reached_ = reached;
    grads_.assign(reached.size(), 0);
    launched_.clear();
    unawaited_ = 0;
  }
  void grad(size_t unit) {
    RC_ASSERT(units_[unit].whole);
    ++grads_[unit];
  }
  void mark(const std::string& what) { log_.push_back(what); }
  bool whole(size_t unit) const { return units_[unit].whole; }
  size_t gathered_besides_root() const {
    size_t count = 0;
    for (size_t u = 1; u < units_.size(); ++u) count += gather_started(u);
    return count;
  }
  const std::vector<size_t>& launched() const { return launched_; }
  size_t unawaited() const { return unawaited_; }
  const std::vector<std::string>& log() const { return log_; }

 private:
  struct State {
    bool whole = false;
    bool gathering = false;
  };
  const Case& c_;
  std::vector<State> units_;
  std::vector<size_t> reached_, grads_, launched_;
  size_t unawaited_ = 0;
  std::vector<std::string> log_;
};

// Some of `units`, each once, in any order.
std::vector<size_t> calls_of(std::vector<size_t> units) {
  std::vector<size_t> calls;
  while (!units.empty() && *rc::gen::weightedElement<bool>({{4, true}, {1, false}})) {
    const size_t pick = *rc::gen::inRange<size_t>(0, units.size());
    calls.push_back(units[pick]);
    units.erase(units.begin() + pick);
  }
  return calls;
}

rc::Gen<Case> cases() {
  return rc::gen::exec([] {
    Case c;
    const size_t count = *rc::gen::inRange<size_t>(1, 7);
    for (size_t u = 0; u < count; ++u) {
      c.units.push_back({.trainable = *rc::gen::inRange<size_t>(0, 4),
                         .has_frozen = *rc::gen::arbitrary<bool>(),
                         .called = u > 0});
    }
    if (count > 2 && *rc::gen::arbitrary<bool>()) c.units.back().called = false;
    c.options.backward_prefetch = *rc::gen::element(
        BackwardPrefetch::kNone, BackwardPrefetch::kBackwardPre, BackwardPrefetch::kBackwardPost);
    c.options.forward_prefetch = *rc::gen::arbitrary<bool>();
    c.options.limit_all_gathers = *rc::gen::arbitrary<bool>();
    c.options.reshard_after_forward = *rc::gen::arbitrary<bool>();
    std::vector<size_t> callable;
    for (size_t u = 1; u < count; ++u) {
      if (c.units[u].called) callable.push_back(u);
    }
    const size_t iterations = *rc::gen::inRange<size_t>(1, 5);
    for (size_t i = 0; i < iterations; ++i) {
      Iteration it;
      it.will_backward = *rc::gen::weightedElement<bool>({{3, true}, {1, false}});
      it.reduce = *rc::gen::weightedElement<bool>({{3, true}, {1, false}});
      if (i > 0 && *rc::gen::arbitrary<bool>()) {
        it.calls = c.iterations.back().calls;
      } else {
        it.calls = calls_of(callable);
      }
      for (size_t call = 0; call < it.calls.size(); ++call) {
        it.output_requires_grad.push_back(*rc::gen::weightedElement<bool>({{4, true}, {1, false}}));
      }
      for (int rank = 0; rank < kRanks; ++rank) {
        std::vector<size_t> reached(count, 0);
        reached[0] = *rc::gen::inRange<size_t>(0, c.units[0].trainable + 1);
        for (size_t call = 0; call < it.calls.size(); ++call) {
          const size_t u = it.calls[call];
          if (it.output_requires_grad[call]) {
            reached[u] = *rc::gen::inRange<size_t>(0, c.units[u].trainable + 1);
          }
        }
        it.reached.push_back(reached);
      }
      c.iterations.push_back(std::move(it));
    }
    return c;
  });
}

// Runs every iteration of the case on `rank` as FSDP's hooks do, checking
// what each step leaves; returns the rank's collectives.
std::vector<std::string> run_rank(const Case& c, int rank) {
  FakeUnits units(c);
  UnitSchedule schedule(c.units, c.options, units);
  std::vector<size_t> previous_calls;
  for (const Iteration& it : c.iterations) {
    const std::vector<size_t>& reached = it.reached[rank];
    units.begin_iteration(reached);
    schedule.begin_forward(it.will_backward);
    RC_ASSERT(units.whole(0));
    const bool same_order = it.calls == previous_calls && !previous_calls.empty();
    std::vector<size_t> awaiting;  // in call order
    for (size_t call = 0; call < it.calls.size(); ++call) {
      const size_t u = it.calls[call];
      if (same_order && call > 0 && c.options.forward_prefetch && !c.options.limit_all_gathers) {
        RC_ASSERT(units.gather_started(u));  // prefetched for this call
      }
      schedule.enter(u);
      RC_ASSERT(units.whole(u));
      if (schedule.leave(u, it.output_requires_grad[call])) awaiting.push_back(u);
    }
    previous_calls = it.calls;
    if (!it.will_backward) {
      schedule.reshard_all();
      RC_ASSERT(units.gathered_besides_root() == 0u && !units.whole(0));
      RC_ASSERT(units.launched().empty());
      continue;
    }
    schedule.end_forward();
    RC_ASSERT(awaiting.empty() || it.will_backward);
    std::vector<size_t> unreached;
    for (size_t u = 0; u < c.units.size(); ++u)
      unreached.push_back(c.units[u].trainable - reached[u]);
    RC_ASSERT(schedule.begin_backward(unreached, it.reduce));
    for (size_t i = awaiting.size(); i-- > 0;) {
      const size_t u = awaiting[i];
      RC_ASSERT(!schedule.begin_backward(unreached, it.reduce));
      if (i + 1 < awaiting.size() &&
          c.options.backward_prefetch == BackwardPrefetch::kBackwardPre &&
          !c.options.limit_all_gathers) {
        RC_ASSERT(units.gather_started(u));  // prefetched for this backward
      }
      units.mark("pre-backward of " + std::to_string(u));
      schedule.pre_backward(u);
      for (size_t g = 0; g < reached[u]; ++g) {
        units.grad(u);
        schedule.grad_ready(u);
        RC_ASSERT(units.unawaited() <= UnitSchedule::kReductionsInFlight);
      }
    }
    for (size_t g = 0; g < reached[0]; ++g) {
      units.grad(0);
      schedule.grad_ready(0);
    }
    schedule.finish_backward(it.reduce);
    RC_ASSERT(!schedule.in_backward());
    std::vector<size_t> expected;
    for (size_t u : schedule.launch_order()) {
      if (it.reduce && c.units[u].trainable > 0) expected.push_back(u);
    }
    RC_ASSERT(units.launched() == expected);
    schedule.reshard_all();
    RC_ASSERT(units.gathered_besides_root() == 0u && !units.whole(0));
  }
  return units.log();
}

RC_GTEST_PROP(UnitSchedule, RanksWhoseBatchesReachOtherParametersMoveUnitsAlike, ()) {
  const Case c = *cases();
  const std::vector<std::string> first = run_rank(c, 0);
  for (int rank = 1; rank < kRanks; ++rank) RC_ASSERT(run_rank(c, rank) == first);
}

// A rank whose batch skips a unit's parameters (LayerDrop) while another's
// uses them: the skipping rank launches that unit's reduce-scatter where
// the other does, after the unit is gathered for its backward, not at the
// start of backward.
RC_GTEST_PROP(UnitSchedule, ALayerOneRankSkipsReducesAfterItsBackwardBegins, ()) {
  Case c;
  c.units = {{.trainable = 1}, {.trainable = 2}};
  c.iterations.push_back(
      {.calls = {1}, .output_requires_grad = {true}, .reached = {{1, 2}, {1, 0}}});
  const std::vector<std::string> expected = {"AG0", "AG1", "pre-backward of 1",
                                             "AG1", "RS1", "RS0"};
  RC_ASSERT(run_rank(c, 0) == expected);
  RC_ASSERT(run_rank(c, 1) == expected);
}

}  // namespace
}  // namespace engine::model::sharding
