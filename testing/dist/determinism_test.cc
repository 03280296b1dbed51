// Deterministic scheduling: a seed replays one interleaving exactly (the
// self-check compares two runs' event traces), different seeds try different
// orders, and a body that depends on something else is caught.
#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "engine/dist/dist.h"
#include "sim/world.h"
#include "testing/harness.h"

namespace dist = engine::dist;

namespace {

sim::WorldOptions deterministic(uint64_t seed) {
  sim::WorldOptions options = harness::test_options(seed);
  options.deterministic = true;
  return options;
}

// Collectives on the world and on a subgroup, point to point around a ring,
// with a large all_reduce (moved by every rank) and a timeout nobody waits out.
void mixed_calls(int rank) {
  const int n = dist::get_world_size();
  auto evens = dist::new_group({0, 2});
  at::Tensor big = at::full({40000}, rank + 1.0);
  dist::all_reduce(big);
  if (rank % 2 == 0) {
    at::Tensor t = at::ones({3});
    dist::broadcast(t, 2, evens);
  }
  at::Tensor token = at::full({2}, rank + 0.5);
  auto sent = dist::send_async(token, (rank + 1) % n);
  at::Tensor got = at::zeros({2});
  dist::recv(got, (rank + n - 1) % n);
  sent->wait();
  dist::barrier();
  dist::all_gather(at::full({1}, rank));
}

TEST(Determinism, ASeedReplaysTheSameTrace) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const auto violation = sim::determinism_violation(4, deterministic(seed), mixed_calls);
    EXPECT_FALSE(violation) << *violation;
  }
}

TEST(Determinism, ASeedReplaysTheSameFaults) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    auto options = deterministic(seed);
    options.faults = sim::FaultPlan::swarm(seed, 4, 12, std::chrono::milliseconds(2000));
    const auto violation = sim::determinism_violation(4, options, mixed_calls);
    EXPECT_FALSE(violation) << options.faults.to_string() << ": " << *violation;
  }
}

TEST(Determinism, SeedsTryDifferentOrders) {
  std::set<std::vector<std::string>> orders;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const auto outcome = sim::World(4, deterministic(seed)).run_all(mixed_calls);
    ASSERT_FALSE(outcome.root_cause) << sim::error_message(outcome.root_cause);
    std::vector<std::string> arrivals;  // who started call #2 (the all_reduce), in order
    for (const auto& event : outcome.trace) {
      if (event.find("call #2 ") != std::string::npos) arrivals.push_back(event);
    }
    ASSERT_EQ(arrivals.size(), 4u);
    orders.insert(arrivals);
  }
  // 24 orders exist; PCT's random priorities reach many of them.
  EXPECT_GE(orders.size(), 6u);
}

TEST(Determinism, ResultsAreTheSameUnderEveryOrder) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const auto sums = harness::collect_ranks<double>(
        4,
        [](int rank) {
          at::Tensor t = at::full({70000}, 1.0 + rank, at::kDouble);
          dist::all_reduce(t);
          return t.sum().item<double>();
        },
        deterministic(seed));
    for (const double sum : sums) EXPECT_EQ(sum, 70000.0 * 10);
  }
}

TEST(Determinism, TheSelfCheckCatchesABodyTheSeedDoesNotFix) {
  std::atomic<int> starts{0};
  const auto violation = sim::determinism_violation(3, deterministic(5), [&](int) {
    // Run-dependent: the second run makes one more barrier on every rank.
    const int run = starts.fetch_add(1) / 3;
    for (int i = 0; i <= run; ++i) dist::barrier();
  });
  ASSERT_TRUE(violation);
  EXPECT_NE(violation->find("two runs of sim seed 5 diverge at event #"), std::string::npos)
      << *violation;
  EXPECT_NE(violation->find("call #2 barrier"), std::string::npos) << *violation;
}

}  // namespace
