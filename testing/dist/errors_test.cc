// Failure paths: every one ends in bounded time with a typed error on every
// rank, naming the ranks involved and the simulator seed. Never a hang.
#include <ATen/core/Tensor.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/dist/describe.h"
#include "engine/dist/dist.h"
#include "sim/world.h"
#include "testing/cases.h"
#include "testing/contains.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace dist = engine::dist;

namespace {

using testing_text::contains;

// Runs `call` on every rank and returns the message of the `Error` it threw
// there ("" where it did not throw).
template <typename Error>
std::vector<std::string> errors_of(int n, const std::function<void(int)>& call,
                                   const sim::WorldOptions& options = harness::test_options()) {
  return harness::collect_ranks<std::string>(
      n,
      [&](int rank) -> std::string {
        try {
          call(rank);
        } catch (const Error& e) {
          return e.what();
        }
        return "";
      },
      options);
}

std::string kind_of(const std::exception_ptr& error) {
  const char* kind = sim::error_kind(error);
  return kind ? kind : "none";
}

enum class Difference { kCollective, kDtype, kShape, kOp, kRoot };

}  // namespace

HARNESS_PROP(Mismatch, EveryKindRaisesOnEveryRankNamingEachCall, ()) {
  const int n = *rc::gen::inRange(2, 9);
  const int odd = *rc::gen::inRange(0, n);
  const auto difference = *rc::gen::element(Difference::kCollective, Difference::kDtype,
                                            Difference::kShape, Difference::kOp, Difference::kRoot);
  const uint64_t seed = *rc::gen::arbitrary<uint32_t>();
  const auto messages = errors_of<dist::CollectiveMismatch>(
      n,
      [&](int rank) {
        const bool is_odd = rank == odd;
        at::Tensor t =
            at::ones({is_odd && difference == Difference::kShape ? 5 : 4},
                     is_odd && difference == Difference::kDtype ? at::kDouble : at::kFloat);
        if (difference == Difference::kCollective && is_odd) return dist::broadcast(t, 0);
        if (difference == Difference::kRoot) return dist::reduce(t, is_odd ? (odd + 1) % n : odd);
        dist::all_reduce(t, is_odd && difference == Difference::kOp ? "max" : "sum");
      },
      harness::test_options(seed));
  for (int r = 0; r < n; ++r) {
    const std::string& m = messages[r];
    RC_ASSERT(contains(m, "[rank " + std::to_string(r) + "]"));
    RC_ASSERT(contains(m, "rank " + std::to_string(odd) + ": "));
    RC_ASSERT(contains(m, "rank " + std::to_string((odd + 1) % n) + ": "));
    RC_ASSERT(contains(m, "sim seed=" + std::to_string(seed)));
  }
}

// A random subgroup (often without rank 0, its ranks not contiguous) with
// the odd rank inside: every member's message names the ranks by their
// global numbers and the group by its ranks; the other ranks see nothing.
HARNESS_PROP(Mismatch, OnASubgroupNamesGlobalRanks, ()) {
  const int n = *rc::gen::inRange(3, 9);
  const std::vector<int> members = *cases::subgroup(n, 2);
  const int odd = *rc::gen::elementOf(members);
  const uint64_t seed = *rc::gen::arbitrary<uint32_t>();
  const auto messages = errors_of<dist::CollectiveMismatch>(
      n,
      [&](int rank) {
        const dist::GroupPtr group = dist::new_group(members);
        if (!group->is_member()) return;
        at::Tensor t = at::ones({4}, rank == odd ? at::kDouble : at::kFloat);
        dist::all_reduce(t, "sum", group);
      },
      harness::test_options(seed));
  const int peer = odd == members[0] ? members[1] : members[0];
  for (int r = 0; r < n; ++r) {
    const std::string& m = messages[r];
    if (!std::binary_search(members.begin(), members.end(), r)) {
      RC_ASSERT(m.empty());
      continue;
    }
    RC_ASSERT(contains(m, "[rank " + std::to_string(r) + "]"));
    RC_ASSERT(contains(m, "rank " + std::to_string(odd) + ": "));
    RC_ASSERT(contains(m, "rank " + std::to_string(peer) + ": "));
    RC_ASSERT(contains(m, "[" + engine::dist::describe_ranks(members) + "]"));
  }
}

// A member of a random subgroup never makes its call there: the other
// members time out naming it by its global rank, and the group by its ranks.
HARNESS_PROP(MissingRank, OnASubgroupOthersNameItsGlobalRank, ()) {
  const int n = *rc::gen::inRange(3, 9);
  const std::vector<int> members = *cases::subgroup(n, 2);
  const int missing = *rc::gen::elementOf(members);
  sim::WorldOptions options = harness::test_options(*rc::gen::arbitrary<uint32_t>());
  options.virtual_time = true;
  options.timeout = std::chrono::minutes(10);
  // Calls 1 and 2 (new_group, all_reduce) are on the world, call 3 on the subgroup.
  options.faults = sim::FaultPlan::parse("never:" + std::to_string(missing) + "@3");
  const auto outcome = sim::World(n, options).run_all([&](int rank) {
    const dist::GroupPtr group = dist::new_group(members);
    at::Tensor t = at::ones({4});
    dist::all_reduce(t);
    if (group->is_member()) dist::all_reduce(t, "sum", group);
  });
  for (int r = 0; r < n; ++r) {
    const std::string message = sim::error_message(outcome.errors[r]);
    if (r == missing) {
      RC_ASSERT(kind_of(outcome.errors[r]) == "InjectedHang");
    } else if (!std::binary_search(members.begin(), members.end(), r)) {
      RC_ASSERT(message == "");
    } else {
      RC_ASSERT(kind_of(outcome.errors[r]) == "Timeout");
      RC_ASSERT(contains(message, "[rank " + std::to_string(r) + "]"));
      RC_ASSERT(contains(message, "on group [" + engine::dist::describe_ranks(members) +
                                      "] timed out after 600000 ms waiting for rank(s) " +
                                      std::to_string(missing)));
    }
  }
}

TEST(Mismatch, CallsOnDifferentGroupsAreADeadlockNamedOnEveryRank) {
  const auto messages = errors_of<dist::CollectiveMismatch>(2, [](int rank) {
    const dist::GroupPtr pair = dist::new_group({0, 1});
    at::Tensor t = at::ones({2});
    dist::all_reduce(t, "sum", rank == 0 ? pair : nullptr);
  });
  for (const auto& m : messages) {
    EXPECT_TRUE(contains(m, "deadlock")) << m;
    EXPECT_TRUE(contains(m, "rank 0 waits in all_reduce")) << m;
    EXPECT_TRUE(contains(m, "rank 1 waits in all_reduce")) << m;
  }
}

TEST(MissingRank, OthersTimeOutNamingIt) {
  auto options = harness::test_options();
  options.timeout = std::chrono::milliseconds(300);
  std::mutex mutex;
  std::condition_variable cv;
  int gave_up = 0;
  const auto messages = errors_of<dist::Timeout>(
      4,
      [&](int rank) {
        std::unique_lock<std::mutex> lock(mutex, std::defer_lock);
        if (rank == 3) {  // stays away from the collective until the others gave up
          lock.lock();
          cv.wait_for(lock, std::chrono::minutes(1), [&] { return gave_up == 3; });
          return;
        }
        at::Tensor t = at::ones({2});
        try {
          dist::all_reduce(t);
        } catch (...) {
          lock.lock();
          ++gave_up;
          cv.notify_all();
          throw;
        }
      },
      options);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(contains(messages[r], "timed out after 300 ms waiting for rank(s) 3"))
        << messages[r];
    EXPECT_TRUE(contains(messages[r], "rank 3 is running its own code")) << messages[r];
  }
  EXPECT_EQ(messages[3], "");
}

TEST(MissingRank, ARankThatReturnedIsReportedAtOnce) {
  const auto messages = errors_of<dist::CollectiveMismatch>(4, [](int rank) {
    if (rank == 2) return;
    at::Tensor t = at::ones({2});
    dist::all_reduce(t);
  });
  for (int r : {0, 1, 3}) {
    EXPECT_TRUE(contains(messages[r], "rank 2 has returned from its body")) << messages[r];
  }
}

TEST(PeerFailure, OthersFailFastAndRunRethrowsTheRootCause) {
  std::vector<std::string> messages(4);
  try {
    harness::run_ranks(4, [&](int rank) {
      if (rank == 2) throw std::runtime_error("boom on rank 2");
      at::Tensor t = at::ones({2});
      try {
        dist::all_reduce(t);
      } catch (const dist::PeerFailure& e) {
        messages[rank] = e.what();
      }
    });
    FAIL() << "World::run did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom on rank 2");
  }
  for (int r : {0, 1, 3}) EXPECT_TRUE(contains(messages[r], "rank 2 failed")) << messages[r];
}

TEST(SendRecv, DifferentSizesAreAMismatchOnBothSides) {
  const auto messages = errors_of<dist::CollectiveMismatch>(2, [](int rank) {
    if (rank == 0) return dist::send(at::ones({3}), 1);
    at::Tensor t = at::zeros({4});
    dist::recv(t, 0);
  });
  for (const auto& m : messages) EXPECT_TRUE(contains(m, "send/recv mismatch")) << m;
}

// Ranks 0 and 1 exchange a tensor that rank 2 takes no part in; their next
// collective on the whole group is still the same call as rank 2's.
TEST(SendRecv, APairsExchangeLeavesTheOthersInStepForTheNextCollective) {
  harness::run_ranks(3, [](int rank) {
    at::Tensor t = at::full({2}, static_cast<double>(rank + 1));
    if (rank == 0) dist::send(t, 1);
    if (rank == 1) dist::recv(t, 0);
    dist::all_reduce(t);
    EXPECT_TRUE(at::equal(t, at::full({2}, 5.0)));
  });
}

TEST(Mismatch, ARankThatGaveUpIsOutOfStepBySequenceNumber) {
  auto options = harness::test_options();
  options.timeout = std::chrono::milliseconds(200);
  std::mutex mutex;
  std::condition_variable cv;
  bool rank0_gave_up = false;
  const auto messages = errors_of<dist::CollectiveMismatch>(
      2,
      [&](int rank) {
        at::Tensor t = at::ones({2});
        std::unique_lock<std::mutex> lock(mutex);
        if (rank == 1) {  // arrives only after rank 0 gave up on all_reduce #1
          cv.wait_for(lock, std::chrono::minutes(1), [&] { return rank0_gave_up; });
          lock.unlock();
          return dist::all_reduce(t);  // its #1 meets rank 0's #2
        }
        lock.unlock();
        EXPECT_THROW(dist::all_reduce(t), dist::Timeout);
        lock.lock();
        rank0_gave_up = true;
        cv.notify_all();
        lock.unlock();
        dist::all_reduce(t);
      },
      options);
  for (const auto& m : messages) {
    EXPECT_TRUE(contains(m, "rank 0: all_reduce #2")) << m;
    EXPECT_TRUE(contains(m, "rank 1: all_reduce #1")) << m;
  }
}

TEST(Work, WaitWithATimeoutOnASendNobodyReceives) {
  std::atomic<bool> sender_done{false};
  const auto messages = errors_of<dist::Timeout>(2, [&](int rank) {
    if (rank == 1) {  // busy elsewhere (not in a call) until the sender gave up
      while (!sender_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    dist::WorkPtr sent = dist::send_async(at::ones({2}), 1);
    // Posted, so it is not complete until rank 1 receives, which it does not.
    const bool completed_early = sent->is_completed();
    try {
      sent->wait(std::chrono::milliseconds(100));
    } catch (...) {
      sender_done = true;
      throw;
    }
    sender_done = true;
    if (completed_early) throw std::logic_error("send completed without a receiver");
  });
  EXPECT_TRUE(contains(messages[0], "timed out after 100 ms waiting for rank(s) 1")) << messages[0];
}
