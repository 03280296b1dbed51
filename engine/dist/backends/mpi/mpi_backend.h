#pragma once

#include <mpi.h>

#include <functional>
#include <memory>

#include "engine/dist/backend.h"
#include "engine/dist/backends/mpi/mpi_work.h"
#include "engine/dist/backends/mpi/staged_collectives.h"

namespace engine::dist::mpi {

// The engine's Backend on Open MPI, used directly. Registered as "mpi";
// creating the first one initializes MPI (MPI_THREAD_MULTIPLE), and MPI is
// finalized at exit. Every collective returns at once with a Work over
// nonblocking requests.
//
// Where MPI's own nonblocking collective is slow, a collective travels
// another way (docs/backends.md has the measurements behind each rule):
// - all_reduce on up to 8 ranks, where a rank receives at most 64 KiB: every
//   rank sends its whole tensor to every other and reduces them itself.
// - all_gather on up to 8 ranks with blocks under 1 MiB: every block goes by
//   point-to-point message from its input into every other rank's output.
// - broadcast on 2 ranks: one MPI_Isend/MPI_Irecv.
// - reduce_scatter on up to 8 ranks (both forms, for the ops the engine's
//   kernel reduces): each rank sends block p of its input to rank p, which
//   reduces what it receives into its output.
// - reduce_scatter and all_gather with blocks from 256 KiB between ranks of
//   one machine: through a staging area in shared memory
//   (staged_collectives.h), made the first time one could.
// These exchanges use a communicator of their own, apart from the user's
// send/recv. A list's blocks are read where they lie (those under the
// output are copied first); a list of other shapes travels packed.
//
// Guarantees: results as MPI computes them (sums in MPI's order, so floating
// sums may differ in the last bit from the simulator's rank order; integer
// and exactly representable results are identical), except the exchanged
// all_reduce and the exchanged and staged reduce_scatter, which reduce in
// the simulator's rank order. A missing rank surfaces as a Timeout from
// Work::wait after the backend's timeout; the job must then end, since MPI
// cannot cancel a started collective.
class MpiBackend : public Backend {
 public:
  // Takes ownership of `comm`. `world_rank`: this process's rank in the
  // world, which every message names (a subgroup's rank in `comm` differs).
  MpiBackend(MPI_Comm comm, WaitPolicy wait_policy, int world_rank);
  ~MpiBackend() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  std::optional<std::chrono::milliseconds> node_shared_wait() const override {
    return wait_policy_.default_timeout;
  }

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
  int count_of(const at::Tensor& t) const;
  WorkPtr started(MPI_Request request, const char* what, MpiWork::Tensors keep_alive,
                  std::function<void()> on_success = nullptr) const;

  // Sends `block` to every peer and receives each peer's block at
  // slots + peer * block's bytes, on exchange_comm_ with `tag`.
  MpiWork::Requests exchange(const at::Tensor& block, char* slots, int tag, const char* what) const;
  // Sends block_for(peer) (as many elements of the dtype as `block`) to
  // every peer and receives each peer's at slot_of(peer).
  MpiWork::Requests exchange(const at::Tensor& block,
                             const std::function<const void*(int)>& block_for,
                             const std::function<void*(int)>& slot_of, int tag,
                             const char* what) const;
  // reduce_scatter of blocks that fit the output (see readable_blocks), read
  // where they lie by the staging area and the exchange.
  WorkPtr reduce_scatter_blocks(at::Tensor& output, std::vector<at::Tensor> blocks, ReduceOp op);
  WorkPtr exchanged_reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& blocks,
                                   ReduceOp op);
  WorkPtr exchanged_all_gather(at::Tensor& output, const at::Tensor& input);
  WorkPtr exchanged_all_reduce(at::Tensor& tensor, ReduceOp op);
  // The staging area's collectives when a reduce_scatter or all_gather of
  // blocks of `block_bytes` goes through it, else nullptr; makes the area
  // (collectively) the first time one could.
  StagedCollectives* staging_for(size_t block_bytes);

  MPI_Comm comm_;
  // The backend's own point-to-point traffic: the exchanges (all_gather,
  // all_reduce) and the 2-rank broadcast.
  MPI_Comm exchange_comm_;
  int rank_ = 0;
  int size_ = 1;
  WaitPolicy wait_policy_;
  int world_rank_;
  std::unique_ptr<StagedCollectives> staged_;  // null until made, or when it cannot be
  bool staging_tried_ = false;
};

}  // namespace engine::dist::mpi
