// Rank and group information, not-distributed semantics, subgroups, the
// node-local group, master_only, and isolation between thread-ranks.
#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tensor.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "engine/dist/dist.h"
#include "sim/world.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace dist = engine::dist;

// FACTS.md: never initialised -> single-process answers and no-op collectives.
TEST(NotDistributed, AnswersAsOneProcess) {
  EXPECT_FALSE(dist::is_distributed());
  EXPECT_EQ(dist::get_rank(), 0);
  EXPECT_EQ(dist::get_world_size(), 1);
  EXPECT_EQ(dist::get_dist_info(), std::make_pair(0, 1));
  EXPECT_TRUE(dist::is_main_process());
  EXPECT_FALSE(dist::get_backend().has_value());
  EXPECT_EQ(dist::get_local_rank(), 0);
  EXPECT_EQ(dist::get_local_size(), 1);
  EXPECT_EQ(dist::get_local_group(), nullptr);
  EXPECT_EQ(dist::get_default_group(), nullptr);
  EXPECT_EQ(dist::get_comm_device(), at::Device(at::kCPU));
}

TEST(NotDistributed, CollectivesAreNoOpsAndIdentities) {
  at::Tensor t = at::tensor({1.5, -2.0});
  const at::Tensor before = t.clone();
  dist::barrier();
  dist::all_reduce(t, "mean");
  dist::broadcast(t, 0);
  dist::reduce(t, 0);
  EXPECT_TRUE(t.equal(before));
  const auto gathered = dist::all_gather(t);
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_TRUE(gathered[0].is_same(t));
  EXPECT_TRUE(dist::gather(t)[0].is_same(t));
  EXPECT_EQ(dist::all_gather_object(c10::IValue(7))[0].toInt(), 7);
  EXPECT_EQ((*dist::gather_object(c10::IValue(7)))[0].toInt(), 7);
  const auto collected = dist::collect_results({c10::IValue(1), c10::IValue(2), c10::IValue(3)}, 2);
  ASSERT_EQ(collected->size(), 2u);
  EXPECT_EQ((*collected)[1].toInt(), 2);
}

TEST(NotDistributed, ReduceOpIsStillValidated) {
  // mmengine skips the check at world size 1; a typo must not pass silently.
  at::Tensor t = at::ones({2});
  EXPECT_THROW(dist::all_reduce(t, "average"), dist::InvalidArgument);
  EXPECT_THROW(dist::all_reduce(t, "band"), dist::InvalidArgument);
}

TEST(WorldSizeOne, BehavesLikeNotDistributedButReportsTheBackend) {
  harness::run_ranks(1, [](int) {
    at::Tensor t = at::tensor({3, -3}, at::kLong);
    dist::all_reduce(t, "mean");
    if (!t.equal(at::tensor({3, -3}, at::kLong))) throw std::logic_error("mean changed data");
    if (!dist::all_gather(t)[0].is_same(t)) throw std::logic_error("all_gather copied");
    if (!dist::is_distributed() || dist::get_backend() != "sim") throw std::logic_error("not sim");
    if (dist::get_comm_device() != at::Device(at::kCPU)) throw std::logic_error("not on the CPU");
  });
}

TEST(Info, RanksAndMainProcessInAWorld) {
  const auto info = harness::collect_ranks<std::vector<int>>(4, [](int rank) {
    const auto [r, n] = dist::get_dist_info();
    return std::vector<int>{r, n, dist::is_main_process(), dist::get_rank() == rank};
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(info[r], (std::vector<int>{r, 4, r == 0, 1}));
}

TEST(MasterOnly, RunsOnRankZeroOnly) {
  std::atomic<int> calls{0};
  const auto results = harness::collect_ranks<std::optional<int>>(4, [&](int rank) {
    auto twice = dist::master_only([&](int x) {
      ++calls;
      return 2 * x;
    });
    return twice(rank + 21);
  });
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(results[0], 42);
  for (int r = 1; r < 4; ++r) EXPECT_FALSE(results[r].has_value());
}

HARNESS_PROP(NewGroup, MembersReduceAmongThemselvesNonMembersAreRejected, ()) {
  const int n = *rc::gen::inRange(2, 9);
  const auto in_group = *rc::gen::container<std::vector<bool>>(n, rc::gen::arbitrary<bool>());
  std::vector<int> members;
  for (int r = 0; r < n; ++r) {
    if (in_group[r]) members.push_back(r);
  }
  RC_PRE(!members.empty());
  // new_group accepts the ranks in any order.
  if (*rc::gen::arbitrary<bool>()) std::reverse(members.begin(), members.end());
  const int src_index = *rc::gen::inRange<int>(0, members.size());
  struct Outcome {
    int group_rank = -2;
    int64_t sum = -1;
    int64_t broadcast = -1;
    bool rejected = false;
  };
  const auto outcomes = harness::collect_ranks<Outcome>(
      n,
      [&](int rank) {
        Outcome out;
        const dist::GroupPtr group = dist::new_group(members);
        out.group_rank = dist::get_rank(group);
        at::Tensor t = at::full({3}, rank + 1, at::kLong);
        if (!group->is_member()) {
          try {
            dist::all_reduce(t, "sum", group);
          } catch (const dist::InvalidArgument&) {
            out.rejected = true;
          }
          return out;
        }
        dist::all_reduce(t, "sum", group);
        out.sum = t[0].item<int64_t>();
        at::Tensor b = at::full({1}, rank, at::kLong);
        dist::broadcast(b, members[src_index], group);
        out.broadcast = b.item<int64_t>();
        return out;
      },
      harness::test_options(*rc::gen::arbitrary<uint32_t>()));
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  int64_t expected_sum = 0;
  for (const int m : members) expected_sum += m + 1;
  for (int r = 0; r < n; ++r) {
    const auto it = std::find(sorted.begin(), sorted.end(), r);
    if (it == sorted.end()) {
      RC_ASSERT(outcomes[r].group_rank == -1);
      RC_ASSERT(outcomes[r].rejected);
      continue;
    }
    RC_ASSERT(outcomes[r].group_rank == static_cast<int>(it - sorted.begin()));
    RC_ASSERT(outcomes[r].sum == expected_sum);
    RC_ASSERT(outcomes[r].broadcast == members[src_index]);
  }
}

TEST(LocalGroup, MissingUntilInitialisedThenPerNode) {
  // 3 nodes of 2 ranks; every rank creates every node's group in one order.
  const auto results = harness::collect_ranks<std::vector<int64_t>>(6, [](int rank) {
    bool missing = false;
    try {
      dist::get_local_rank();
    } catch (const dist::DistError&) {
      missing = true;
    }
    dist::init_local_group(rank / 2, 2);
    at::Tensor t = at::full({1}, rank, at::kLong);
    dist::all_reduce(t, "sum", dist::get_local_group());
    return std::vector<int64_t>{missing, dist::get_local_rank(), dist::get_local_size(),
                                t.item<int64_t>()};
  });
  for (int r = 0; r < 6; ++r) {
    const int64_t node_sum = (r / 2) * 4 + 1;  // ranks 2k and 2k+1
    EXPECT_EQ(results[r], (std::vector<int64_t>{1, r % 2, 2, node_sum})) << "rank " << r;
  }
}

// A rank that names a node it is not on, or sizes that do not divide the
// world, fails at once with a typed error naming it; the ranks that went on
// into the groups' creation are told it failed, and nobody hangs.
TEST(LocalGroup, ArgumentsThatDoNotFitFailOnTheRankThatGaveThem) {
  const std::vector<std::pair<int, int>> wrong = {{0, 2}, {2, 2}, {-1, 2}, {1, 3}, {0, 0}};
  for (const auto& [node_rank, num_per_node] : wrong) {
    sim::WorldOptions options = harness::test_options();
    options.virtual_time = true;
    const auto outcome = sim::World(4, options).run_all([&](int rank) {
      if (rank == 3) {
        dist::init_local_group(node_rank, num_per_node);
      } else {
        dist::init_local_group(rank / 2, 2);
      }
    });
    const std::string call = "init_local_group(node_rank=" + std::to_string(node_rank) +
                             ", num_per_node=" + std::to_string(num_per_node) + ")";
    EXPECT_STREQ(sim::error_kind(outcome.errors[3]), "InvalidArgument") << call;
    EXPECT_EQ(sim::error_message(outcome.errors[3]).rfind("[rank 3] " + call + " does not fit", 0),
              0u)
        << sim::error_message(outcome.errors[3]);
    for (int r = 0; r < 3; ++r) {
      EXPECT_STREQ(sim::error_kind(outcome.errors[r]), "PeerFailure") << call << ", rank " << r;
    }
  }
}

TEST(Isolation, WorldsShareNothingAndLeaveNoContextBehind) {
  // Two worlds side by side, of different sizes, each sees only itself.
  std::vector<int> sizes(2);
  std::thread other([&] {
    harness::run_ranks(3, [&](int rank) {
      at::Tensor t = at::ones({1});
      dist::all_reduce(t);
      if (rank == 0) sizes[1] = static_cast<int>(t.item<float>());
    });
  });
  harness::run_ranks(5, [&](int rank) {
    at::Tensor t = at::ones({1});
    dist::all_reduce(t);
    if (rank == 0) sizes[0] = static_cast<int>(t.item<float>());
  });
  other.join();
  EXPECT_EQ(sizes, (std::vector<int>{5, 3}));
  EXPECT_FALSE(dist::is_distributed());
}

TEST(Isolation, ThreadsStartedByARankAreNotBoundToIt) {
  harness::run_ranks(2, [](int) {
    bool seen = true;
    std::thread([&] { seen = dist::is_distributed(); }).join();
    if (seen) throw std::logic_error("a helper thread inherited the rank's context");
  });
}
