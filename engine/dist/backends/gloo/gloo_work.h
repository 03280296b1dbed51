#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "engine/dist/backends/gloo/read_mode.h"
#include "engine/dist/work.h"

namespace engine::dist::gloo {

// A call's work (c10d's, from the adapter's pairs or Gloo's own algorithms)
// and what to do once it succeeded.
//
// A wait that runs out of time throws Timeout but leaves a collective
// pending (a late rank may still come); only a finished work's error is
// final. Gloo itself ends a send or receive whose wait ran out, so that
// Timeout is final. A finished work's failure is a Timeout when Gloo timed
// out, else a PeerFailure; both name `rank` (the world rank) and `what`.
class GlooWork : public Work {
 public:
  // `read_mode`: the pairs' mode, for a call of the adapter's own pairs (else
  // null): its waiters let the pairs spin. `timeout`: for kNoTimeout.
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::function<void()> on_success, const char* what,
           int rank, std::chrono::milliseconds timeout, std::shared_ptr<ReadMode> read_mode);

  bool is_completed() override { return work_->isCompleted(); }
  void wait(std::chrono::milliseconds timeout) override;
  std::exception_ptr exception() override { return error_; }

 private:
  std::exception_ptr failure(const std::exception& e, std::chrono::milliseconds timeout) const;
  std::exception_ptr outcome(std::chrono::milliseconds timeout) const;
  std::string message(std::chrono::milliseconds timeout) const;
  void finish(std::exception_ptr error);

  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> on_success_;
  const char* what_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<ReadMode> read_mode_;
  bool finished_ = false;
  std::exception_ptr error_;
};

// A PeerFailure naming `rank` for the gloo call `what`, which failed with `e`.
std::exception_ptr peer_failure(int rank, const char* what, const std::exception& e);

}  // namespace engine::dist::gloo
