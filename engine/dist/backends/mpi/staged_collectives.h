#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <memory>

#include "engine/dist/backends/mpi/mpi_work.h"
#include "engine/dist/reduce_op.h"
#include "engine/dist/shm/staging.h"
#include "engine/dist/work.h"

namespace engine::dist::mpi {

class StagedCall;

// reduce_scatter and all_gather through a shm::StagingArea (engine/dist/shm/staging.h)
// for the ranks of a communicator on one machine, with empty MPI messages as
// the words that chunks are staged.
//
// Why: between processes Open MPI moves a large message with one kernel copy
// (CMA), several times slower here than a copy in user space; through the
// area a reduce_scatter costs a copy and a reduction rather than a kernel
// copy and a reduction.
//
// The waiting is MpiWork's (bounded by the backend's timeout, never spinning
// on shared memory), and the messages keep MPI's progress going. Staged
// operations run one at a time in the order they were issued: issuing one
// first completes the one before it (the same on every rank, as every rank
// issues collectives in the same order). Not thread-safe, like the backend;
// a staged Work must not be waited for once its backend is gone.
class StagedCollectives {
 public:
  // Collective over `comm` (of at least 2 ranks): the staged collectives when every rank
  // of `comm` could map every other rank's segment (they share a machine,
  // /dev/shm has room, DIST_ENGINE_NODE_SHARED is not 0 on any rank); null
  // on every rank otherwise. They keep a duplicate of `comm` for its
  // messages.
  static std::unique_ptr<StagedCollectives> create(MPI_Comm comm, int world_rank);
  ~StagedCollectives();
  StagedCollectives(const StagedCollectives&) = delete;
  StagedCollectives& operator=(const StagedCollectives&) = delete;

  // The elementwise reduction with `op` of every rank's blocks[rank], in
  // rank order (shm::StagedTransfer::reduce_scatter), each block read where it
  // lies. Requires can_reduce(dtype, op); one block a rank, each contiguous,
  // of output's dtype and size, none overlapping the output.
  WorkPtr reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& blocks, ReduceOp op,
                         WaitPolicy policy);
  // Every rank's `input` end to end in `output` (contiguous, of
  // input.numel() * size elements).
  WorkPtr all_gather(at::Tensor& output, const at::Tensor& input, WaitPolicy policy);

 private:
  friend class StagedCall;
  StagedCollectives(std::unique_ptr<shm::StagingArea> area, MPI_Comm notices, int world_rank);

  WorkPtr start(StagedCall call, MpiWork::Tensors keep_alive, const char* what, WaitPolicy policy);

  std::unique_ptr<shm::StagingArea> area_;
  MPI_Comm notices_;  // the empty messages, apart from every other traffic
  int world_rank_;
  WorkPtr in_flight_;  // the last staged operation issued
};

}  // namespace engine::dist::mpi
