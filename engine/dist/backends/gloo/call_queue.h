#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace engine::dist::gloo {

// Runs calls one at a time, in the order they were queued, on a thread of
// its own. Ranks that queue the same collectives in the same order run them
// in that order on every rank, which Gloo's pairs and slots rely on.
class CallQueue {
 public:
  // `before_each` (may be empty) runs on the queue's thread before each call;
  // what it throws fails that call's work, and the queue goes on.
  explicit CallQueue(std::function<void()> before_each = nullptr);
  // Runs what is still queued, then stops the thread.
  ~CallQueue();
  CallQueue(const CallQueue&) = delete;
  CallQueue& operator=(const CallQueue&) = delete;

  // The work finishes once `call` has run, with what it threw, if anything.
  c10::intrusive_ptr<c10d::Work> enqueue(std::function<void()> call);

 private:
  class Task;
  void serve();

  std::function<void()> before_each_;
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<c10::intrusive_ptr<Task>> queue_;
  bool stopping_ = false;
  std::thread server_;
};

}  // namespace engine::dist::gloo
