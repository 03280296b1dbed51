#include "engine/dist/backends/mpi/mpi_work.h"

#include <thread>

#include "engine/dist/backends/mpi/mpi_types.h"
#include "engine/dist/errors.h"

namespace engine::dist::mpi {

MpiWork::MpiWork(Requests requests, Tensors keep_alive, std::function<void()> on_success,
                 const char* what, int rank, WaitPolicy policy)
    : requests_(std::move(requests)),
      keep_alive_(std::move(keep_alive)),
      on_success_(std::move(on_success)),
      what_(what),
      rank_(rank),
      policy_(policy) {}

std::shared_ptr<MpiWork> MpiWork::in_rounds(Requests first_round, Tensors keep_alive,
                                            NextRound next_round, const char* what, int rank,
                                            WaitPolicy policy) {
  auto work = std::make_shared<MpiWork>(std::move(first_round), std::move(keep_alive), nullptr,
                                        what, rank, policy);
  work->next_round_ = std::move(next_round);
  return work;
}

bool MpiWork::test() {
  int done = 0;
  try {
    check(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done,
                      MPI_STATUSES_IGNORE),
          what_, rank_);
  } catch (...) {
    error_ = std::current_exception();
    return true;
  }
  return done != 0;
}

bool MpiWork::started_next_round() {
  if (error_ || !next_round_) return false;
  try {
    return next_round_(requests_);
  } catch (...) {
    error_ = std::current_exception();
    return false;
  }
}

void MpiWork::finish() {
  if (finished_) return;
  finished_ = true;
  if (error_ || !on_success_) return;
  try {
    on_success_();
  } catch (...) {
    error_ = std::current_exception();
  }
}

bool MpiWork::is_completed() {
  while (!finished_ && test()) {
    if (!started_next_round()) finish();
  }
  return finished_;
}

void MpiWork::wait(std::chrono::milliseconds timeout) {
  // Open MPI progresses a nonblocking collective only inside MPI calls, so
  // waiting means testing, as MPI_Wait itself does: a few tests back to back
  // (a small message is done within them, and a yield or a clock read costs
  // more than a test), then test and yield the core once per round (a peer
  // on it gets it at once) for a short spin, then test and sleep. A sleeping
  // rank leaves its core idle, so the kernel moves a waiting thread onto it
  // at once: on a machine with other work, the peer this rank waits for may
  // be queued behind that work on the other core, where a rank that only
  // yields keeps its own core and the peer waits for a whole time slice.
  // The spin lasts a millisecond, longer than most calls of a step: a rank
  // that sleeps through a call of a few hundred microseconds leaves its core
  // to the hypervisor, which is slow to give it back.
  constexpr int kTestsBeforeYielding = 16;
  constexpr auto kSpin = std::chrono::milliseconds(1);
  constexpr auto kSleep = std::chrono::microseconds(50);
  for (int i = 0; i < kTestsBeforeYielding; ++i) {
    if (is_completed()) {
      rethrow_error();
      return;
    }
  }
  if (timeout == kNoTimeout) timeout = policy_.default_timeout;
  const auto start = std::chrono::steady_clock::now();
  while (!is_completed()) {
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= timeout) {
      throw Timeout(
          on_rank(rank_, std::string("mpi ") + what_ + " did not complete within " +
                             std::to_string(timeout.count()) +
                             " ms: some rank never made the matching call (or died). MPI "
                             "cannot cancel it, so end the job and look at the other ranks"));
    }
    if (waited >= kSpin) {
      std::this_thread::sleep_for(kSleep);
    } else if (policy_.yield_between_tests) {
      std::this_thread::yield();
    }
  }
  rethrow_error();
}

void MpiWork::rethrow_error() const {
  if (error_) std::rethrow_exception(error_);
}

}  // namespace engine::dist::mpi
