// Every kind of Work ends in a Timeout on the rank that waits when its peer
// never makes the matching call (testing/work_kinds.h); so do the object
// collectives, which wait inside. The simulator completes a call inside it,
// so the wait is the world's timeout; the same kinds in real processes, where
// wait(timeout) itself gives up, are //testing/process:work_timeout_*.
#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "engine/dist/dist.h"
#include "testing/contains.h"
#include "testing/harness.h"
#include "testing/work_kinds.h"

namespace dist = engine::dist;

namespace {

constexpr auto kTimeout = std::chrono::milliseconds(300);

using testing_text::contains;

// The late rank stays away (running its own code, not in a call) until the
// waiter has made every call.
class LateRank {
 public:
  void stay_away() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, std::chrono::minutes(1), [&] { return waiter_done_; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    waiter_done_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool waiter_done_ = false;
};

sim::WorldOptions short_timeout() {
  sim::WorldOptions options = harness::test_options();
  options.timeout = kTimeout;
  options.node_shared_buffers = true;
  return options;
}

// A call the waiter makes on a group of its own: prepared on both ranks
// (some preparations are collective), then made on the waiter only, where it
// must throw Timeout.
struct WaiterCall {
  std::string name;
  std::function<std::function<void()>(const dist::GroupPtr&)> prepare;
};

// The waiter and the late rank are world ranks 1 and 2, group ranks 0 and 1
// of their own group; rank 0 stays out. So a message that names a group rank
// where the world's is meant shows.
constexpr int kWorld = 3;
constexpr int kWaiter = 1;

// The Timeout's message per call ("" if it did not time out).
std::vector<std::string> timeouts_on_the_waiter(const std::vector<WaiterCall>& calls) {
  LateRank late;
  return harness::collect_ranks<std::vector<std::string>>(
      kWorld,
      [&](int rank) {
        std::vector<std::function<void()>> prepared;
        for (const auto& call : calls) {
          const dist::GroupPtr pair = dist::new_group({kWaiter, kWaiter + 1});
          if (pair->is_member()) prepared.push_back(call.prepare(pair));
        }
        std::vector<std::string> messages(calls.size());
        if (rank != kWaiter) {
          late.stay_away();
          return messages;
        }
        for (size_t i = 0; i < calls.size(); ++i) {
          try {
            prepared[i]();
          } catch (const dist::Timeout& error) {
            messages[i] = error.what();
          }
        }
        late.release();
        return messages;
      },
      short_timeout())[kWaiter];
}

void expect_named_timeouts(const std::vector<WaiterCall>& calls,
                           const std::vector<std::string>& messages) {
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_TRUE(work_kinds::names_only_rank(messages[i], kWaiter, kWorld))
        << calls[i].name << ": " << messages[i];
    EXPECT_TRUE(contains(messages[i], "300 ms")) << calls[i].name << ": " << messages[i];
  }
}

}  // namespace

TEST(WorkTimeout, EveryKindOfWorkTimesOutOnTheWaiter) {
  std::vector<WaiterCall> calls;
  for (const auto& kind : work_kinds::all_kinds()) {
    calls.push_back({kind.name, [kind](const dist::GroupPtr& group) -> std::function<void()> {
                       work_kinds::Call call = kind.prepare(group);
                       return [call] { call().work->wait(kTimeout); };
                     }});
  }
  expect_named_timeouts(calls, timeouts_on_the_waiter(calls));
}

TEST(WorkTimeout, EveryObjectCollectiveTimesOutOnTheWaiter) {
  const c10::IValue object(std::string("waiter"));
  const std::vector<WaiterCall> calls = {
      {"all_gather_object",
       [&](const dist::GroupPtr& group) -> std::function<void()> {
         return [&, group] { dist::all_gather_object(object, group); };
       }},
      {"gather_object to the waiter",
       [&](const dist::GroupPtr& group) -> std::function<void()> {
         return [&, group] { dist::gather_object(object, kWaiter, group); };
       }},
      {"broadcast_object_list from the late rank",
       [&](const dist::GroupPtr& group) -> std::function<void()> {
         return [&, group] {
           std::vector<c10::IValue> list = {object};
           dist::broadcast_object_list(list, kWaiter + 1, group);
         };
       }},
  };
  expect_named_timeouts(calls, timeouts_on_the_waiter(calls));
}
