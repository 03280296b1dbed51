#include "engine/dist/backends/gloo/gloo_work.h"

#include <gloo/common/error.h>

#include <optional>
#include <string>
#include <thread>

#include "engine/dist/errors.h"

namespace engine::dist::gloo {
namespace {

// c10's errors carry a backtrace that says nothing to the user of a timeout.
std::string without_backtrace(const std::exception& e) {
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  return error ? error->what_without_backtrace() : e.what();
}

}  // namespace

std::exception_ptr peer_failure(int rank, const char* what, const std::exception& e) {
  return std::make_exception_ptr(
      PeerFailure(on_rank(rank, std::string("gloo ") + what + " failed: " + e.what())));
}

GlooWork::GlooWork(c10::intrusive_ptr<c10d::Work> work, std::function<void()> on_success,
                   const char* what, int rank, std::chrono::milliseconds timeout,
                   std::shared_ptr<ReadMode> read_mode)
    : work_(std::move(work)),
      on_success_(std::move(on_success)),
      what_(what),
      rank_(rank),
      timeout_(timeout),
      read_mode_(std::move(read_mode)) {}

void GlooWork::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) timeout = timeout_;
  if (!finished_) {
    std::optional<ReadMode::Waiting> waiting;
    if (read_mode_) waiting.emplace(*read_mode_);
    bool done = false;
    // Yield the core a bounded number of times before blocking: a futex
    // wake-up costs tens of microseconds on small VMs, and yielding hands
    // the core to the backend's and Gloo's threads, which finish the work.
    constexpr int kYieldsBeforeBlocking = 256;
    for (int i = 0; i < kYieldsBeforeBlocking && !work_->isCompleted(); ++i) {
      std::this_thread::yield();
    }
    try {
      done = work_->wait(timeout);
    } catch (const std::exception& e) {
      if (!work_->isCompleted()) throw Timeout(message(timeout) + ": " + without_backtrace(e));
      finish(outcome(timeout));
    }
    if (!done && !finished_) throw Timeout(message(timeout));
    if (!finished_) finish(nullptr);
  }
  if (error_) std::rethrow_exception(error_);
}

// Gloo reports a rank that never came and a closed connection with the same
// type (IoException); only its message tells them apart ("Read timeout",
// "Timed out waiting ...": checked by //testing/process:timeout_gloo_2_*).
std::exception_ptr GlooWork::failure(const std::exception& e,
                                     std::chrono::milliseconds timeout) const {
  const std::string text = e.what();
  const bool timed_out =
      dynamic_cast<const ::gloo::IoException*>(&e) != nullptr &&
      (text.find("timeout") != std::string::npos || text.find("Timed out") != std::string::npos);
  if (timed_out) return std::make_exception_ptr(Timeout(message(timeout) + ": " + e.what()));
  return peer_failure(rank_, what_, e);
}

// A completed work's own outcome, not the wait's error.
std::exception_ptr GlooWork::outcome(std::chrono::milliseconds timeout) const {
  const std::exception_ptr own = work_->exception();
  if (!own) return nullptr;
  try {
    std::rethrow_exception(own);
  } catch (const std::exception& e) {
    return failure(e, timeout);
  } catch (...) {
    return own;
  }
}

std::string GlooWork::message(std::chrono::milliseconds timeout) const {
  return on_rank(rank_, std::string("gloo ") + what_ + " did not complete within " +
                            std::to_string(timeout.count()) +
                            " ms: some rank never made the matching call (or died); end the job "
                            "and look at the other ranks");
}

// Records the outcome once: the work's error, or what on_success_ threw.
void GlooWork::finish(std::exception_ptr error) {
  finished_ = true;
  error_ = error;
  if (error_ || !on_success_) return;
  try {
    on_success_();
  } catch (...) {
    error_ = std::current_exception();
  }
}

}  // namespace engine::dist::gloo
