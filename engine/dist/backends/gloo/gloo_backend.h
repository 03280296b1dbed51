#pragma once

#include <chrono>
#include <memory>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "engine/dist/backend.h"
#include "engine/dist/backends/gloo/pair_collectives.h"

namespace engine::dist::gloo {

// The engine's Backend on LibTorch's c10d::ProcessGroupGloo, rendezvousing
// through c10d's TCPStore (rank 0 hosts it at MASTER_ADDR:MASTER_PORT).
// Registered as "gloo". Gloo runs each call on its own worker threads, so
// every call returns at once with a Work.
//
// all_reduce, broadcast and all_gather of contiguous CPU tensors run on Gloo pairs of the adapter's
// own in synchronous mode, sharing the device (PairCollectives): all_reduce reduces there with the
// engine's kernel, so every dtype and op the simulator reduces works.
//
// Where the rest runs on c10d's Gloo (LibTorch 1.13), which lacks some of
// what the engine offers, the adapter supplies it: bool tensors reduce as
// uint8 (sum/max/bor -> max, product/min/band -> min, bxor -> bxor);
// bfloat16 reduces in float32 and is rounded once at the end (exact where the
// simulator is; otherwise at least as accurate); reduce_scatter goes through
// the pairs' ring (PairCollectives) where their kernel reduces the dtype and
// op, else it is an all_reduce of the packed inputs; reduce leaves non-root
// tensors untouched
// (Gloo uses them as scratch). A missing rank surfaces as a Timeout from
// Work::wait after the wait's timeout, or once Gloo's own (the backend's
// timeout) ends the call; after Gloo has ended a call, that communicator is
// broken and the job must end.
class GlooBackend : public Backend {
 public:
  // `may_spin`: whether the machine has a core for each of its ranks (see
  // ReadMode). `world_rank`: this process's rank in the world, which every
  // message names (a subgroup's `rank` differs).
  GlooBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
              std::chrono::milliseconds timeout, const std::string& hostname, bool may_spin,
              int world_rank);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "gloo"; }
  std::optional<std::chrono::milliseconds> node_shared_wait() const override { return timeout_; }

  WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) override;
  WorkPtr broadcast(at::Tensor& tensor, int root) override;
  WorkPtr reduce(at::Tensor& tensor, int root, ReduceOp op) override;
  WorkPtr all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input) override;
  WorkPtr all_gather_into_tensor(at::Tensor& output, const at::Tensor& input) override;
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
  // The tensor Gloo reduces in place of the caller's, and the op to use.
  struct Reduction {
    at::Tensor tensor;
    ReduceOp op;
  };
  Reduction staged(const at::Tensor& tensor, ReduceOp op) const;
  WorkPtr reduce_scatter_through_all_reduce(const at::Tensor& output, at::Tensor all, ReduceOp op);
  WorkPtr wrap(c10::intrusive_ptr<c10d::Work> work, const char* what,
               std::function<void()> on_success = nullptr) const;
  WorkPtr point_to_point(const char* what,
                         const std::function<c10::intrusive_ptr<c10d::Work>()>& start) const;
  // A call of the adapter's own pairs: its waiters let the pairs spin.
  WorkPtr wrap_pairs(c10::intrusive_ptr<c10d::Work> work, const char* what,
                     std::function<void()> on_success = nullptr) const;

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  std::unique_ptr<PairCollectives> pairs_;  // null on one rank
  int rank_;
  int world_rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::string hostname_;
  bool may_spin_;
  int splits_ = 0;
};

}  // namespace engine::dist::gloo
