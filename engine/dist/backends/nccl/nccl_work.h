#pragma once

#include <ATen/core/Tensor.h>
#include <cuda_runtime.h>

#include <chrono>
#include <vector>

#include "engine/dist/work.h"

namespace engine::dist::nccl {

// One call enqueued on the backend's stream: a CUDA event recorded after it,
// whose completion is the call's. It keeps the call's tensors alive until
// then. wait(timeout) blocks the host until the event, or gives up with
// Timeout after `timeout` (kNoTimeout: the backend's); NCCL cannot cancel a
// started collective, so the message says to end the job.
class NcclWork : public Work {
 public:
  // Takes `event` (destroyed with the work). `rank`: the world rank that
  // messages name.
  NcclWork(cudaEvent_t event, std::vector<at::Tensor> keep_alive, const char* what, int rank,
           std::chrono::milliseconds timeout);
  // Dropped unfinished, the tensors go back to the caching allocator, which
  // hands their memory out again on the stream that made them (the caller's
  // current one): that stream first waits for NCCL to be done with them, as
  // c10d's recordStream arranges. The host never waits here.
  ~NcclWork() override;

  bool is_completed() override;
  void wait(std::chrono::milliseconds timeout) override;
  std::exception_ptr exception() override { return nullptr; }

 private:
  cudaEvent_t event_;
  std::vector<at::Tensor> keep_alive_;
  const char* what_;
  int rank_;
  std::chrono::milliseconds timeout_;
};

}  // namespace engine::dist::nccl
