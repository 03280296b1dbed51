#pragma once

#include <c10/core/ScalarType.h>
#include <gloo/context.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/dist/backends/gloo/read_mode.h"
#include "engine/dist/reduce_op.h"

namespace engine::dist::gloo {

// Large all_reduce and all_gather, and broadcasts of any size, over the pairs
// of a Gloo context in synchronous mode, in messages of at most kChunkBytes:
// all_reduce is the ring's reduce-scatter then all-gather, broadcast a
// pipeline along the ring from the root. Data is sent from and received into
// the caller's memory, except the reduce-scatter's incoming chunk, which
// lands in a scratch buffer and is reduced from there.
//
// Why bounded messages: in synchronous mode a write returns once the kernel
// holds the bytes, so a rank blocks writing while its peer is blocked writing
// too unless one message fits in the socket buffers. Each rank here sends a
// chunk, then reads the chunk its previous rank sent, so at most one chunk of
// its own waits unread on each connection; Gloo sizes a pair's send buffer to
// the message, and a stock kernel's cap (208 KiB, doubled by the kernel) plus
// the peer's receive buffer holds a chunk twice over, so no write can wait on
// a peer that is itself waiting.
//
// Every rank must make the same calls in the same order on one thread: the
// slots are fixed, and each call reads exactly the messages its peers sent
// for it (the pairs deliver them in order).
class ChunkedRing {
 public:
  static constexpr size_t kChunkBytes = 256 * 1024;
  // A broadcast's chain has no cycle, so its messages need no bound for
  // safety, and larger ones cost fewer wake-ups.
  static constexpr size_t kBroadcastChunkBytes = 1024 * 1024;

  // Takes this ring's slots from `context` (every rank in the same order) and
  // sizes the send buffers (a collective call); refreshes `read_mode` before
  // each message it reads.
  ChunkedRing(std::shared_ptr<::gloo::Context> context, ReadMode& read_mode);

  // `count` elements of `dtype` at `data`, reduced in place; every rank ends
  // with the same bits (each slice is reduced once, then copied).
  void all_reduce(void* data, int64_t count, c10::ScalarType dtype, ReduceOp op);
  // `blocks[p]` holds the `count_per_rank` elements meant for rank p (they
  // are only read, and may lie anywhere); `output` (not overlapping any
  // block) gets every rank's block `rank` reduced. All_reduce's first half,
  // with the partial sums in `output` and a block of scratch taken in turn.
  void reduce_scatter(const std::vector<const void*>& blocks, void* output, int64_t count_per_rank,
                      c10::ScalarType dtype, ReduceOp op);
  // Every rank's `bytes_per_rank` into `gathered`, in rank order; this
  // rank's part must already be in place.
  void all_gather(void* gathered, size_t bytes_per_rank);
  void broadcast(void* data, size_t bytes, int root);

 private:
  void size_send_buffers();
  // The ring's reduce-scatter steps over parts part(first - s) (sent) and
  // part(first - s - 1) (received and reduced) for s = 0 .. size - 2: in
  // the end part(first + 1) holds everyone's sum.
  template <typename PartOf>
  void reduce_round(uint8_t* data, size_t bytes, c10::ScalarType dtype, ReduceOp op, PartOf part,
                    int first);

  std::shared_ptr<::gloo::Context> context_;
  ReadMode& read_mode_;
  int reduce_slot_;
  int gather_slot_;
  std::vector<uint8_t> scratch_;
  std::vector<uint8_t> partial_;  // reduce_scatter's other block of partial sums
};

}  // namespace engine::dist::gloo
