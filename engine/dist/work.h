#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>

namespace engine::dist {

// One operation in flight. Backends may complete it at any time before wait()
// returns (the simulator completes it inside the call; MPI and Gloo in the
// background). Errors of the operation itself (mismatch, timeout, peer
// failure) surface from wait(), never from the call that started it; argument
// errors are thrown at once by the call.
//
// A Work may be waited on from one thread at a time.
class Work {
 public:
  static constexpr std::chrono::milliseconds kNoTimeout = std::chrono::milliseconds::max();

  virtual ~Work() = default;

  // True once the operation finished, successfully or not.
  virtual bool is_completed() = 0;

  // Blocks until the operation finished and rethrows its error, if any.
  // Throws Timeout if it has not finished within `timeout` (kNoTimeout: the
  // backend's own timeout). A Timeout does not cancel the operation: it
  // stays in flight, and a later wait completes it once the ranks it waits
  // for have made their calls. The exception is a gloo send or recv, which
  // Gloo ends at the Timeout, closing the group's connections: a later
  // wait rethrows the Timeout. No backend can cancel a collective, so where
  // the missing rank never comes the group stays blocked and the job
  // should end.
  virtual void wait(std::chrono::milliseconds timeout = kNoTimeout) = 0;

  // The operation's error once completed, else nullptr.
  virtual std::exception_ptr exception() = 0;
};

using WorkPtr = std::shared_ptr<Work>;

// A Work that has already finished, with `error` (nullptr for success).
WorkPtr completed_work(std::exception_ptr error = nullptr);

// A Work that waits for `inner`, then runs `on_success` once (for example the
// division of a mean, or copying a contiguous buffer back into the caller's
// tensor). An error from `inner` skips `on_success`.
WorkPtr then(WorkPtr inner, std::function<void()> on_success);

}  // namespace engine::dist
