#pragma once

#include <gloo/transport/device.h>

#include <chrono>
#include <memory>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "engine/dist/backend.h"
#include "engine/dist/backends/gloo/pair_collectives.h"
#include "engine/dist/backends/gloo/unbound_collectives.h"

namespace engine::dist::gloo {

// The engine's Backend on Gloo (the engine's own copy: third_party/gloo),
// rendezvousing through c10d's TCPStore (rank 0 hosts it at
// MASTER_ADDR:MASTER_PORT). Registered as "gloo". Every call returns at once
// with a Work; two threads of the backend's run the collectives.
//
// all_reduce, broadcast, reduce, all_gather and reduce_scatter run on Gloo
// pairs of the adapter's own in synchronous mode (PairCollectives), and
// reduce with the engine's kernel, so every dtype and op the simulator
// reduces works, with the simulator's results; reduce is an all_reduce whose
// result only the root keeps (its peers' tensors are left untouched).
// gather, scatter, all_to_all, barrier, send and recv run Gloo's own
// algorithms and unbound buffers on a second context (UnboundCollectives).
// Tensors that are not CPU and contiguous travel through a contiguous CPU
// copy. A missing rank surfaces as a Timeout from Work::wait after the
// wait's timeout, or once Gloo's own (the backend's timeout) ends the call;
// after Gloo has ended a call, that communicator is broken and the job must
// end.
class GlooBackend : public Backend {
 public:
  // `may_spin`: whether the machine has a core for each of its ranks (see
  // ReadMode). `world_rank`: this process's rank in the world, which every
  // message names (a subgroup's `rank` differs).
  GlooBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
              std::chrono::milliseconds timeout, std::shared_ptr<::gloo::transport::Device> device,
              bool may_spin, int world_rank);

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
  WorkPtr wrap(c10::intrusive_ptr<c10d::Work> work, const char* what,
               std::function<void()> on_success = nullptr) const;
  // A call of the adapter's own pairs: its waiters let the pairs spin.
  WorkPtr wrap_pairs(c10::intrusive_ptr<c10d::Work> work, const char* what,
                     std::function<void()> on_success = nullptr) const;
  WorkPtr point_to_point(const char* what,
                         const std::function<c10::intrusive_ptr<c10d::Work>()>& start) const;
  void check_reducible(const at::Tensor& tensor, ReduceOp op) const;
  WorkPtr reduce_scatter_through_all_reduce(const at::Tensor& output, at::Tensor all, ReduceOp op);

  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<::gloo::transport::Device> device_;
  int rank_;
  int world_rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  bool may_spin_;
  int splits_ = 0;
  std::unique_ptr<PairCollectives> pairs_;  // null on one rank
  std::unique_ptr<UnboundCollectives> unbound_;
};

}  // namespace engine::dist::gloo
