#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>
#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "engine/dist/work.h"

namespace engine::dist::mpi {

// How a backend's works wait.
struct WaitPolicy {
  std::chrono::milliseconds default_timeout;
  // Whether the wait yields the core between tests itself: not when Open MPI
  // already yields in each idle progress round (mpi_yield_when_idle, which
  // it turns on for oversubscribed nodes), so that an idle round yields once.
  bool yield_between_tests = true;
};

// One nonblocking MPI operation: its requests (in one round, or in several
// that each start when the one before has completed), the tensors that must
// live until it completed, and what to do once it did (copy a packed buffer
// out).
//
// Open MPI makes progress only inside MPI calls, so is_completed() and wait()
// test the requests. wait(timeout) gives up with Timeout after `timeout`
// (kNoTimeout: the policy's default) and leaves the requests in flight, as
// Work::wait says: a later wait completes them.
class MpiWork : public Work {
 public:
  // Inline room for what most calls have (one request; a tensor or two):
  // a call of a few microseconds notices allocations.
  using Requests = c10::SmallVector<MPI_Request, 2>;
  using Tensors = c10::SmallVector<at::Tensor, 2>;

  MpiWork(Requests requests, Tensors keep_alive, std::function<void()> on_success, const char* what,
          int rank, WaitPolicy policy);

  // An operation in rounds: each time every request of the current round
  // has completed, `next_round` runs; it replaces `requests` with the next
  // round's and returns true, or returns false when the operation is done.
  // It runs inside is_completed() and wait(), like the requests' progress.
  using NextRound = std::function<bool(Requests& requests)>;
  static std::shared_ptr<MpiWork> in_rounds(Requests first_round, Tensors keep_alive,
                                            NextRound next_round, const char* what, int rank,
                                            WaitPolicy policy);

  bool is_completed() override;
  void wait(std::chrono::milliseconds timeout) override;
  std::exception_ptr exception() override { return error_; }

 private:
  bool test();
  bool started_next_round();
  void finish();
  void rethrow_error() const;

  Requests requests_;
  Tensors keep_alive_;
  std::function<void()> on_success_;
  NextRound next_round_;
  const char* what_;
  int rank_;
  WaitPolicy policy_;
  bool finished_ = false;
  std::exception_ptr error_;
};

}  // namespace engine::dist::mpi
