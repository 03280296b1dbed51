// Fault plans and the virtual clock: under any plan every rank ends, the
// survivors with an error that names the faulty rank. Never a hang.
#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "engine/dist/dist.h"
#include "sim/world.h"
#include "testing/contains.h"
#include "testing/harness.h"

namespace dist = engine::dist;

namespace {

using std::chrono::milliseconds;

using testing_text::contains;

sim::WorldOptions virtual_options(const std::string& plan, milliseconds timeout) {
  sim::WorldOptions options = harness::test_options();
  options.faults = sim::FaultPlan::parse(plan);
  options.virtual_time = true;
  options.timeout = timeout;
  return options;
}

// Ten all_reduces of ones; every rank checks each sum.
void ten_sums(int world_size) {
  for (int i = 0; i < 10; ++i) {
    at::Tensor t = at::ones({4});
    dist::all_reduce(t);
    if (!t.equal(at::full({4}, world_size))) throw std::logic_error("wrong sum");
  }
}

TEST(FaultPlan, ReadsWhatItWrites) {
  const std::string text = "crash:2@5,delay:1@3+200ms,never:0@7,garble:3@2";
  const auto plan = sim::FaultPlan::parse(text);
  ASSERT_EQ(plan.faults.size(), 4u);
  EXPECT_EQ(plan.faults[3].kind, sim::Fault::Kind::kGarble);
  EXPECT_EQ(plan.faults[1].kind, sim::Fault::Kind::kDelay);
  EXPECT_EQ(plan.faults[1].delay, milliseconds(200));
  EXPECT_EQ(plan.to_string(), text);
  EXPECT_TRUE(plan.stops_a_rank());
  EXPECT_TRUE(sim::FaultPlan::parse("").empty());
  EXPECT_FALSE(sim::FaultPlan::parse("delay:0@1+5ms").stops_a_rank());
}

TEST(FaultPlan, RefusesMalformedPlansSayingTheSyntax) {
  for (const char* bad :
       {"crash:2", "crash:1@0", "delay:1@3", "never:1@2+5ms", "boom:1@2", "crash:1@2,",
        // Found by tools/fuzz: numbers past what stoi and stoull read.
        "crash:216666666666666666666666666666666@7", "crash:1@9999999999999999999",
        "delay:1@2+99999999999ms"}) {
    try {
      sim::FaultPlan::parse(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& error) {
      EXPECT_TRUE(contains(error.what(), "kind:rank@call")) << error.what();
    }
  }
}

TEST(FaultPlan, SwarmDrawsTheMixFromTheSeed) {
  const auto draw = [](uint64_t seed) {
    return sim::FaultPlan::swarm(seed, 4, 20, milliseconds(100)).to_string();
  };
  EXPECT_EQ(draw(7), draw(7));
  std::set<std::string> mixes;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    const auto plan = sim::FaultPlan::parse(draw(seed));
    std::string mix;
    for (const auto& f : plan.faults) mix += std::to_string(static_cast<int>(f.kind));
    std::sort(mix.begin(), mix.end());
    mix.erase(std::unique(mix.begin(), mix.end()), mix.end());
    mixes.insert(mix);
    for (const auto& f : plan.faults) {
      EXPECT_LT(f.rank, 4);
      EXPECT_GE(f.call, 1u);
      EXPECT_LE(f.call, 20u);
    }
  }
  EXPECT_EQ(mixes.size(), 8u) << "every subset of the three kinds, the empty one included";
}

TEST(Faults, ACrashedRankIsNamedByEverySurvivor) {
  const auto outcome =
      sim::World(4, virtual_options("crash:2@3", milliseconds(60000))).run_all([](int) {
        ten_sums(4);
      });
  EXPECT_STREQ(sim::error_kind(outcome.root_cause), "InjectedCrash");
  EXPECT_TRUE(contains(sim::error_message(outcome.root_cause),
                       "[rank 2] crashed at its call #3 (all_reduce)"));
  for (int r : {0, 1, 3}) {
    EXPECT_STREQ(sim::error_kind(outcome.errors[r]), "PeerFailure");
    EXPECT_TRUE(contains(sim::error_message(outcome.errors[r]), "rank 2 failed"))
        << sim::error_message(outcome.errors[r]);
    EXPECT_TRUE(contains(sim::error_message(outcome.errors[r]), "faults crash:2@3"));
  }
}

// A hostile peer: the bytes it sends in one call are random. Every rank that
// reads them gets MalformedInput naming that peer; the others go on.
struct GarbledCall {
  std::string plan;
  std::function<void(int rank)> body;
  std::vector<int> readers;
  std::string named;
};

TEST(Faults, AGarblingPeerIsNamedByEveryRankThatReadsItsBytes) {
  const c10::IValue object = c10::ivalue::Tuple::create({1, "two", at::ones({3})});
  const std::vector<GarbledCall> calls = {
      // Each object collective agrees on the frame size first (call 1),
      // then moves frames (call 2).
      {"garble:1@1",
       [&](int) { dist::all_gather_object(object); },
       {0, 1, 2},
       "the object of rank 1 declares"},
      {"garble:2@1",
       [&](int) { dist::gather_object(object, 0); },
       {0, 1, 2},
       "the object of rank 2 declares"},
      {"garble:1@1",
       [&](int) {
         std::vector<c10::IValue> list = {object};
         dist::broadcast_object_list(list, 1);
       },
       {0, 1, 2},  // the source too: its garbled length comes back to it
       "the object list of rank 1 declares"},
      {"garble:1@2",
       [&](int) { dist::all_gather_object(object); },
       {0, 1, 2},
       "the object of rank 1"},
      {"garble:2@2", [&](int) { dist::gather_object(object, 0); }, {0}, "the object of rank 2"},
      {"garble:1@2",
       [&](int) {
         std::vector<c10::IValue> list = {object};
         dist::broadcast_object_list(list, 1);
       },
       {0, 2},
       "the object list of rank 1"},
  };
  for (const GarbledCall& call : calls) {
    const auto outcome =
        sim::World(3, virtual_options(call.plan, milliseconds(60000))).run_all(call.body);
    for (int rank = 0; rank < 3; ++rank) {
      const bool reads = std::count(call.readers.begin(), call.readers.end(), rank) > 0;
      const std::string message = sim::error_message(outcome.errors[rank]);
      EXPECT_STREQ(sim::error_kind(outcome.errors[rank]), reads ? "MalformedInput" : "ok")
          << call.plan << ", rank " << rank << ": " << message;
      if (reads) {
        EXPECT_TRUE(contains(message, "[rank " + std::to_string(rank) + "] " + call.named))
            << message;
      }
    }
  }
}

// A timeout of ten virtual minutes: were the clock the wall's, the test would
// hit Bazel's limit long before.
TEST(VirtualTime, ARankThatNeverArrivesTimesTheOthersOutAtOnce) {
  const auto started = std::chrono::steady_clock::now();
  const auto outcome =
      sim::World(4, virtual_options("never:3@2", std::chrono::minutes(10))).run_all([](int) {
        ten_sums(4);
      });
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::minutes(5));
  for (int r = 0; r < 3; ++r) {
    const std::string message = sim::error_message(outcome.errors[r]);
    EXPECT_STREQ(sim::error_kind(outcome.errors[r]), "Timeout") << message;
    EXPECT_TRUE(contains(message,
                         "all_reduce #2 (sum, Float[4]) on group [0-3] timed out after 600000 ms "
                         "waiting for rank(s) 3"))
        << message;
    EXPECT_TRUE(contains(message,
                         "rank 3 is held back by the fault plan (never:3@2) at its call "
                         "#2"))
        << message;
  }
  EXPECT_STREQ(sim::error_kind(outcome.errors[3]), "InjectedHang");
}

// Each rank that never arrives waits for the others to finish, not for the
// other ranks that never arrive: under either scheduler all of them end.
TEST(VirtualTime, RanksThatNeverArriveDoNotWaitForEachOther) {
  for (const bool deterministic : {true, false}) {
    sim::WorldOptions options = virtual_options("never:3@2,never:1@2", milliseconds(1000));
    options.deterministic = deterministic;
    const auto outcome = sim::World(4, options).run_all([](int) { ten_sums(4); });
    for (int r : {1, 3}) {
      EXPECT_STREQ(sim::error_kind(outcome.errors[r]), "InjectedHang")
          << "deterministic " << deterministic << ": " << sim::error_message(outcome.errors[r]);
    }
    for (int r : {0, 2}) {
      const std::string message = sim::error_message(outcome.errors[r]);
      EXPECT_STREQ(sim::error_kind(outcome.errors[r]), "Timeout") << message;
      EXPECT_TRUE(contains(message, "waiting for rank(s) 1, 3")) << message;
    }
  }
}

TEST(VirtualTime, AStragglerShorterThanTheTimeoutOnlyDelays) {
  const auto outcome =
      sim::World(4, virtual_options("delay:1@2+30000ms,delay:3@5+59000ms", milliseconds(60000)))
          .run_all([](int) { ten_sums(4); });
  for (int r = 0; r < 4; ++r) {
    EXPECT_STREQ(sim::error_kind(outcome.errors[r]), "ok") << sim::error_message(outcome.errors[r]);
  }
}

TEST(VirtualTime, AStragglerLongerThanTheTimeoutIsNamed) {
  const auto outcome =
      sim::World(3, virtual_options("delay:1@4+61000ms", milliseconds(60000))).run_all([](int) {
        ten_sums(3);
      });
  for (int r : {0, 2}) {
    const std::string message = sim::error_message(outcome.errors[r]);
    EXPECT_STREQ(sim::error_kind(outcome.errors[r]), "Timeout") << message;
    EXPECT_TRUE(contains(message, "rank 1 is held back by the fault plan (delay:1@4+61000ms)"))
        << message;
  }
  // Rank 1 wakes after the others gave up: the group is broken for it too.
  EXPECT_STRNE(sim::error_kind(outcome.errors[1]), "ok");
}

// Rank 0 has a call in flight while it waits in another: rank 1's timeout
// on rank 2 releases it, and its error names rank 2, the root cause, too.
TEST(VirtualTime, ARankReleasedByAnotherRanksTimeoutNamesWhatThatRankWaitedFor) {
  const auto outcome =
      sim::World(3, virtual_options("never:2@1,delay:0@2+1000ms", milliseconds(60000)))
          .run_all([](int rank) {
            at::Tensor in_flight = at::ones({4});
            if (rank != 0) {
              dist::all_reduce(in_flight);
              return;
            }
            auto work = dist::all_reduce_async(in_flight);
            at::Tensor blocking = at::ones({4});
            dist::all_reduce(blocking);
            work->wait();
          });
  const std::string message = sim::error_message(outcome.errors[0]);
  EXPECT_STREQ(sim::error_kind(outcome.errors[0]), "PeerFailure") << message;
  EXPECT_TRUE(contains(message, "rank 1 failed (it timed out waiting for rank 2)")) << message;
  EXPECT_STREQ(sim::error_kind(outcome.errors[1]), "Timeout");
}

TEST(VirtualTime, ASleepingRankIsNeverPartOfADeadlock) {
  // Everyone else waits while rank 0 is delayed: absent, not deadlocked.
  const auto outcome =
      sim::World(2, virtual_options("delay:0@1+1000ms", milliseconds(60000))).run_all([](int) {
        ten_sums(2);
      });
  EXPECT_STREQ(sim::error_kind(outcome.root_cause), "ok");
}

}  // namespace
