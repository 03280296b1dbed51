#pragma once

#include <ATen/core/Tensor.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "engine/dist/backends/gloo/call_queue.h"
#include "engine/dist/backends/gloo/chunked_ring.h"
#include "engine/dist/backends/gloo/gloo_tensors.h"
#include "engine/dist/backends/gloo/read_mode.h"
#include "engine/dist/backends/gloo/staged_pairs.h"
#include "engine/dist/reduce_op.h"

namespace engine::dist::gloo {

// all_reduce, broadcast, all_gather and reduce_scatter on a Gloo context of the adapter's
// own whose pairs are synchronous (the thread that waits for a message reads
// it from the socket itself, instead of Gloo's device thread reading it and
// waking the waiter), run in call order on one thread of its own.
//
// all_reduce and all_gather of up to 64 KiB are each Gloo's buffer-based
// ring all_gather (gloo::AllgatherRing): all_reduce then reduces the
// gathered tensors in rank order on every rank (so every rank ends with the
// same bits), all_gather copies them out. Larger calls, and every broadcast,
// go through a ChunkedRing, in bounded messages. A broadcast is a chain from
// the root, which only sends, so the root does not wait for its peers and
// back-to-back broadcasts overlap, where a gather ring makes every rank wait.
//
// Why: c10d's ProcessGroupGloo runs Gloo's newer algorithms, whose unbound
// buffers handshake before the data moves, and whose device thread hands
// every message to the waiting thread. Both cost time on every message
// (docs/backends.md compares the two).
//
// Gather rings are built per byte size and reused: a ring's constructor takes
// Gloo slots, so every rank must build the same rings in the same order,
// which holds because the ranks make the same calls. Each size has two rings,
// used in turn: a faster peer may start the next call of a size as soon as
// this rank's ring has delivered, and would overwrite the gathered tensors
// before they are used; it cannot get two calls ahead, since every call needs
// every rank's data. Calls of both kinds share the pairs safely: each reads
// exactly the messages its peers sent for it, in the order they were sent.
class PairCollectives {
 public:
  // Up to this size a call is one gather ring; larger ones go in chunks.
  static constexpr size_t kMaxGatherRingBytes = 64 * 1024;
  // reduce_scatter and all_gather with blocks from this size go through a
  // staging area, on 2 to kMaxStagedRanks ranks (the area holds 2 chunks
  // per rank per rank) when they share a machine. Below it a call is bound by
  // one message's latency either way.
  static constexpr size_t kMinStagedBlockBytes = 64 * 1024;
  static constexpr int kMaxStagedRanks = 16;

  // Connects a full mesh of `size` ranks through `store` (a collective call;
  // the store's keys are this context's own). `may_spin`: whether the machine
  // has a core for each of its ranks (see ReadMode).
  PairCollectives(std::shared_ptr<::gloo::transport::Device> device,
                  std::shared_ptr<::gloo::rendezvous::Store> store, int rank, int size,
                  std::chrono::milliseconds timeout, bool may_spin);
  ~PairCollectives();

  // Whether the call can come this way: CPU tensors, contiguous; for
  // all_gather, an output that holds one input a rank.
  bool takes_all_gather(const at::Tensor& output, const at::Tensor& input) const;
  // reduce_scatter: output and blocks plain, one block of output's size and
  // dtype a rank, a kernel reduction.
  bool takes_reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& blocks,
                            ReduceOp op) const;

  // Each queues the call; the work finishes once the tensors are written.
  // all_gather fills `output` with the ranks' inputs in rank order.
  c10::intrusive_ptr<c10d::Work> all_reduce(const at::Tensor& tensor, ReduceOp op);
  c10::intrusive_ptr<c10d::Work> broadcast(const at::Tensor& tensor, int root);
  c10::intrusive_ptr<c10d::Work> all_gather(const at::Tensor& output, const at::Tensor& input);
  // `blocks[p]`, meant for rank p, is read where it lies (a list's tensors or
  // the views of one input; none is written); `output` gets the ranks'
  // blocks[rank] reduced: up to 64 KiB in all through a gather ring (reduced
  // in rank order); from kMinStagedBlockBytes a block, on ranks that share a
  // machine, through a staging area (StagedPairs, reduced in rank order);
  // otherwise through the chunked ring's reduce-scatter half (each rank moves
  // (size-1)/size of the input, as a ring all_reduce's first half).
  c10::intrusive_ptr<c10d::Work> reduce_scatter(const at::Tensor& output,
                                                const std::vector<at::Tensor>& blocks, ReduceOp op);

  // Whoever waits for one of these calls holds a ReadMode::Waiting on it.
  const std::shared_ptr<ReadMode>& read_mode() const { return read_mode_; }

 private:
  class Ring;
  // What a small call does with the gathered tensors (rank order, `bytes` each).
  using UseGathered = std::function<void(const uint8_t* gathered, size_t bytes)>;

  void use_synchronous_pairs(bool spin);
  // Gathers every rank's `pieces`, joined in order.
  c10::intrusive_ptr<c10d::Work> gather(std::vector<at::Tensor> pieces, UseGathered use);
  Ring& ring_for(size_t bytes);
  // On the serving thread: the staging for a call with blocks of
  // `block_bytes`, or null; made (collectively, through gather rings) the
  // first time a call could use it.
  StagedPairs* staging_for(size_t block_bytes);

  std::shared_ptr<::gloo::rendezvous::Context> context_;
  std::shared_ptr<ReadMode> read_mode_;
  struct RingPair {
    std::unique_ptr<Ring> rings[2];
    int next = 0;
  };
  std::map<size_t, RingPair> rings_;
  std::unique_ptr<ChunkedRing> chunked_;
  std::unique_ptr<StagedPairs> staged_;  // null until made, or when it cannot be
  bool staging_tried_ = false;
  // Last: its thread runs the calls on everything above, so it stops first.
  std::unique_ptr<CallQueue> queue_;
};

}  // namespace engine::dist::gloo
