#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "engine/dist/backend.h"

namespace engine::dist::nccl {

// The engine's Backend on NCCL, for CUDA tensors of the rank's device (made
// current at creation: LOCAL_RANK modulo the GPUs, as mmengine's init_dist).
// Built only with `--config=cuda` (then registered as "nccl"). The
// communicator id travels through c10d's TCPStore (rank 0 hosts it at
// MASTER_ADDR:MASTER_PORT). Every call is enqueued on the backend's own
// stream, after what the caller's current stream holds at the call (as c10d
// orders its NCCL stream), and returns a Work over a CUDA event;
// Work::wait(timeout) blocks the host until the call is done, or gives up
// with Timeout (NCCL cannot cancel a started collective: end the job).
//
// NCCL has no bitwise reductions: band/bor/bxor work on bool (as min/max) and
// are InvalidArgument otherwise. gather, scatter and all_to_all are grouped
// point-to-point calls; split is ncclCommSplit.
class NcclBackend : public Backend {
 public:
  // `world_rank`: this process's rank in the world, which every message
  // names (a subgroup's rank in `comm` differs).
  NcclBackend(ncclComm_t comm, int device, std::chrono::milliseconds timeout, int world_rank);
  ~NcclBackend() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  at::Device comm_device() const override {
    return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_));
  }

  WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) override;
  WorkPtr broadcast(at::Tensor& tensor, int root) override;
  WorkPtr reduce(at::Tensor& tensor, int root, ReduceOp op) override;
  WorkPtr all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input) override;
  WorkPtr gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) override;
  WorkPtr scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) override;
  WorkPtr reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                         ReduceOp op) override;
  WorkPtr reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  WorkPtr all_to_all(std::vector<at::Tensor>& outputs,
                     const std::vector<at::Tensor>& inputs) override;
  WorkPtr barrier() override;
  WorkPtr send(const at::Tensor& tensor, int dst, int tag) override;
  WorkPtr recv(at::Tensor& tensor, int src, int tag) override;
  std::shared_ptr<Backend> split(const std::vector<int>& ranks) override;

 private:
  // Throws InvalidArgument unless `t` is a CUDA tensor; then makes the
  // backend's stream wait for the kernels queued so far on the caller's
  // current stream, which may still be writing (or reading) `t`.
  void admit(const at::Tensor& t) const;
  // Records an event after what was enqueued and wraps it in a Work.
  WorkPtr enqueued(const char* what, std::vector<at::Tensor> keep_alive) const;

  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  int world_rank_;
  std::chrono::milliseconds timeout_;
};

}  // namespace engine::dist::nccl
