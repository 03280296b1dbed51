#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/dist/backends/mpi/mpi_work.h"
#include "engine/dist/reduce_op.h"
#include "engine/dist/work.h"

namespace engine::dist::mpi {

class StagedCall;

// Staging memory that every rank of a communicator maps (a named
// shared-memory segment per rank, engine/dist/shared_segment.h), for ranks
// on one machine, and the reduce_scatter and all_gather that go through it.
//
// Why: between processes Open MPI moves a large message with one kernel copy
// (CMA), several times slower here than a copy in user space (2 MiB: about
// 200-300 us against 45 us, bench/HISTORY.md). Through the window a rank
// copies its data in once with memcpy and its peers reduce or copy it
// straight out, so a reduce_scatter costs a copy and a reduction rather than
// a kernel copy and a reduction.
//
// How: chunk by chunk (kChunkBytes of every block), a rank stages its chunk
// in its half of the window for that chunk, tells each peer with an empty
// message, and once every peer's message for the chunk has arrived it
// consumes the peers' staged chunks. A rank's message for chunk k+1 tells
// its peers it has consumed chunk k, so the two halves alternate without
// any other wait. Memory fences pair each message with the stores before it.
// The waiting is MpiWork's (bounded by the backend's
// timeout, never spinning on shared memory), and the messages keep MPI's
// progress going.
//
// Staged operations run one at a time in the order they were issued: issuing
// one first completes the one before it (the same on every rank, as every
// rank issues collectives in the same order). Not thread-safe, like the
// backend; a staged Work must not be waited for once its backend is gone.
class SharedWindow {
 public:
  static constexpr int64_t kChunkBytes = int64_t{256} << 10;

  // Collective over `comm`: the window when every rank of `comm` could map
  // every other rank's segment (they share a machine, /dev/shm has room,
  // DIST_ENGINE_NODE_SHARED is not 0 on any rank); null on every rank
  // otherwise. The window keeps a duplicate of `comm` for its messages.
  static std::unique_ptr<SharedWindow> create(MPI_Comm comm, int world_rank);
  ~SharedWindow();
  SharedWindow(const SharedWindow&) = delete;
  SharedWindow& operator=(const SharedWindow&) = delete;

  // Block `rank` of the elementwise reduction with `op` of every rank's
  // `input`, in rank order (block of rank 0 (op) block of rank 1 ...), so
  // every rank computes the simulator's bits. Requires can_reduce(dtype,
  // op); contiguous tensors that do not overlap; input of output.numel() *
  // size elements.
  WorkPtr reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op,
                         WaitPolicy policy);
  // Every rank's `input` end to end in `output` (contiguous, of
  // input.numel() * size elements).
  WorkPtr all_gather(at::Tensor& output, const at::Tensor& input, WaitPolicy policy);

 private:
  friend class StagedCall;
  SharedWindow(std::vector<at::DataPtr> segments, MPI_Comm notices, int rank, int size,
               int world_rank);

  // Where rank `owner` stages the piece meant for rank `reader` of global
  // chunk `chunk` (a reduce_scatter's; an all_gather's are all at reader 0).
  char* slot(int owner, uint64_t chunk, int reader) const;
  WorkPtr start(StagedCall call, MpiWork::Tensors keep_alive, const char* what, WaitPolicy policy);

  std::vector<at::DataPtr> segments_;  // by rank, mapped here
  MPI_Comm notices_;                   // the empty messages, apart from every other traffic
  int rank_;
  int size_;
  int world_rank_;
  uint64_t next_chunk_ = 0;  // chunks staged so far, over every call
  WorkPtr in_flight_;        // the last staged operation issued
};

}  // namespace engine::dist::mpi
