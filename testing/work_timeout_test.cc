// Every kind of Work ends in a Timeout on the rank that waits when its peer
// never makes the matching call (testing/work_paths.h); so do the object
// collectives, which wait inside. The simulator completes a call inside it,
// so the wait is the world's timeout; the same paths in real processes, where
// wait(timeout) itself gives up, are //testing/process:work_timeout_*.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "engine/dist/dist.h"
#include "testing/harness.h"
#include "testing/work_paths.h"

namespace dist = engine::dist;

namespace {

constexpr auto kTimeout = std::chrono::milliseconds(300);

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

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

// Runs `wait` on rank 0 for every name, each on a group of its own, and
// returns the Timeout's message per name ("" if it did not time out).
std::vector<std::string> timeouts_on_the_waiter(
    const std::vector<std::string>& names,
    const std::function<void(size_t, const dist::GroupPtr&, bool waiter)>& prepare,
    const std::function<void(size_t)>& wait) {
  LateRank late;
  return harness::collect_ranks<std::vector<std::string>>(
      2,
      [&](int rank) {
        std::vector<std::string> messages(names.size());
        for (size_t i = 0; i < names.size(); ++i) prepare(i, dist::new_group({0, 1}), rank == 0);
        if (rank == 1) {
          late.stay_away();
          return messages;
        }
        for (size_t i = 0; i < names.size(); ++i) {
          try {
            wait(i);
          } catch (const dist::Timeout& error) {
            messages[i] = error.what();
          }
        }
        late.release();
        return messages;
      },
      short_timeout())[0];
}

void expect_named_timeouts(const std::vector<std::string>& names,
                           const std::vector<std::string>& messages) {
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_TRUE(contains(messages[i], "[rank 0]")) << names[i] << ": " << messages[i];
    EXPECT_TRUE(contains(messages[i], "300 ms")) << names[i] << ": " << messages[i];
  }
}

}  // namespace

TEST(WorkTimeout, EveryKindOfWorkTimesOutOnTheWaiter) {
  const auto paths = work_paths::all_paths();
  std::vector<std::string> names;
  for (const auto& path : paths) names.push_back(path.name);
  std::vector<work_paths::Call> calls(paths.size());
  const auto messages = timeouts_on_the_waiter(
      names,
      [&](size_t i, const dist::GroupPtr& group, bool waiter) {
        work_paths::Call call = paths[i].prepare(group);
        if (waiter) calls[i] = std::move(call);
      },
      [&](size_t i) { calls[i]().work->wait(kTimeout); });
  expect_named_timeouts(names, messages);
}

TEST(WorkTimeout, EveryObjectCollectiveTimesOutOnTheWaiter) {
  const std::vector<std::string> names = {"all_gather_object", "gather_object to the waiter",
                                          "broadcast_object_list from the late rank"};
  std::vector<dist::GroupPtr> groups(names.size());
  const auto messages = timeouts_on_the_waiter(
      names,
      [&](size_t i, const dist::GroupPtr& group, bool waiter) {
        if (waiter) groups[i] = group;
      },
      [&](size_t i) {
        const c10::IValue object(std::string("waiter"));
        if (i == 0) dist::all_gather_object(object, groups[i]);
        if (i == 1) dist::gather_object(object, 0, groups[i]);
        if (i == 2) {
          std::vector<c10::IValue> list = {object};
          dist::broadcast_object_list(list, 1, groups[i]);
        }
      });
  expect_named_timeouts(names, messages);
}
