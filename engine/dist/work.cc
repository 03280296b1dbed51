#include "engine/dist/work.h"

#include <utility>

namespace engine::dist {
namespace {

class CompletedWork : public Work {
 public:
  explicit CompletedWork(std::exception_ptr error) : error_(std::move(error)) {}
  bool is_completed() override { return true; }
  void wait(std::chrono::milliseconds) override {
    if (error_) std::rethrow_exception(error_);
  }
  std::exception_ptr exception() override { return error_; }

 private:
  std::exception_ptr error_;
};

class ThenWork : public Work {
 public:
  ThenWork(WorkPtr inner, std::function<void()> on_success)
      : inner_(std::move(inner)), on_success_(std::move(on_success)) {}

  bool is_completed() override { return inner_->is_completed(); }

  void wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    // Not std::call_once: its futex wake is a system call on every Work, and
    // a Work is waited on from one thread at a time.
    if (!finished_) {
      finished_ = true;
      try {
        on_success_();
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    if (error_) std::rethrow_exception(error_);
  }

  std::exception_ptr exception() override { return error_ ? error_ : inner_->exception(); }

 private:
  WorkPtr inner_;
  std::function<void()> on_success_;
  bool finished_ = false;
  std::exception_ptr error_;
};

}  // namespace

WorkPtr completed_work(std::exception_ptr error) {
  return std::make_shared<CompletedWork>(std::move(error));
}

WorkPtr then(WorkPtr inner, std::function<void()> on_success) {
  return std::make_shared<ThenWork>(std::move(inner), std::move(on_success));
}

}  // namespace engine::dist
