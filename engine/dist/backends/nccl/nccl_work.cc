#include "engine/dist/backends/nccl/nccl_work.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <string>
#include <thread>

#include "engine/dist/backends/nccl/nccl_types.h"
#include "engine/dist/errors.h"

namespace engine::dist::nccl {

NcclWork::NcclWork(cudaEvent_t event, std::vector<at::Tensor> keep_alive, const char* what,
                   int rank, std::chrono::milliseconds timeout)
    : event_(event),
      keep_alive_(std::move(keep_alive)),
      what_(what),
      rank_(rank),
      timeout_(timeout) {}

NcclWork::~NcclWork() {
  if (!keep_alive_.empty() && !is_completed()) {
    try {
      const auto* cuda = c10::impl::getDeviceGuardImpl(c10::kCUDA);
      cuda->block(event_, cuda->getStream(keep_alive_.front().device()));
    } catch (const std::exception&) {
      // The device failed: nothing is reused safely either way.
    }
  }
  cudaEventDestroy(event_);
}

bool NcclWork::is_completed() { return cudaEventQuery(event_) != cudaErrorNotReady; }

void NcclWork::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) timeout = timeout_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!is_completed()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Timeout(
          on_rank(rank_, std::string("nccl ") + what_ + " did not complete within " +
                             std::to_string(timeout.count()) +
                             " ms: some rank never made the matching call (or died); end the job"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  check(cudaEventQuery(event_), what_, rank_);
}

}  // namespace engine::dist::nccl
