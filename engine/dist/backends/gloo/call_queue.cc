#include "engine/dist/backends/gloo/call_queue.h"

#include <utility>

namespace engine::dist::gloo {

// One queued call; c10d's Work gives it the waiting and the error.
class CallQueue::Task : public c10d::Work {
 public:
  explicit Task(std::function<void()> call) : call_(std::move(call)) {}

  // `before` fails the task as the call would: a throw on the queue's
  // thread would end the process.
  void run(const std::function<void()>& before) {
    try {
      if (before) before();
      call_();
      finish();
    } catch (...) {
      finish(std::current_exception());
    }
  }

 private:
  std::function<void()> call_;
};

CallQueue::CallQueue(std::function<void()> before_each)
    : before_each_(std::move(before_each)), server_([this] { serve(); }) {}

CallQueue::~CallQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_one();
  server_.join();
}

c10::intrusive_ptr<c10d::Work> CallQueue::enqueue(std::function<void()> call) {
  auto task = c10::make_intrusive<Task>(std::move(call));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(task);
  }
  queued_.notify_one();
  return task;
}

void CallQueue::serve() {
  for (;;) {
    c10::intrusive_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task->run(before_each_);
  }
}

}  // namespace engine::dist::gloo
