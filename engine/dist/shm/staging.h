#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/dist/reduce_op.h"
#include "engine/dist/shm/segment.h"

namespace engine::dist::shm {

// Staging memory that every rank of a group on one machine maps (a named
// shared-memory segment per rank, segment.h), and the reduce_scatter
// and all_gather that go through it, chunk by chunk. A backend supplies the
// messages that tell a rank its peers' chunks are staged; this file owns
// what lies where and what is copied and reduced.
//
// Why: between processes a large message costs a kernel copy (Open MPI's
// CMA, or a socket's two copies), several times slower than a copy in user
// space.
// Through the area a rank copies its data in once with memcpy and its peers
// reduce or copy it straight out.
//
// The protocol every rank follows, for each chunk k of a call in turn:
//   stage(k); tell every peer "k is staged";
//   wait until every peer said "k is staged"; consume(k).
// A rank's word for chunk k+1 thus also says it has consumed chunk k, so the
// area's two halves (chunks alternate between them, counted over every call
// on the area) can be reused with no other wait. stage() ends with a release
// fence and consume() begins with an acquire fence, which pair with the
// messages.
class StagingArea {
 public:
  static constexpr int64_t kChunkBytes = int64_t{256} << 10;

  // Collective over the `size` (at least 2) ranks `collectives` reach: the
  // area when every rank could map every other rank's segment (see
  // map_segments_of_every_rank); null on every rank otherwise. Each rank's
  // segment holds 2 * size chunks.
  static std::unique_ptr<StagingArea> create(int rank, int size,
                                             const SegmentCollectives& collectives);

  int rank() const { return rank_; }
  int size() const { return size_; }

  // The global number of the first of a call's `chunks` chunks; the next
  // call's chunks follow them. Every rank must take the same numbers.
  uint64_t take_chunks(int64_t chunks);

  // Where rank `owner` stages the piece meant for rank `reader` of global
  // chunk `chunk` (a reduce_scatter's; an all_gather's are all at reader 0).
  char* slot(int owner, uint64_t chunk, int reader) const;

 private:
  StagingArea(std::vector<at::DataPtr> segments, int rank, int size);

  std::vector<at::DataPtr> segments_;  // by rank, mapped here
  int rank_;
  int size_;
  uint64_t next_chunk_ = 0;
};

// One reduce_scatter or all_gather through a StagingArea, which must outlive
// it, as must the memory it reads and writes.
class StagedTransfer {
 public:
  // `blocks[p]` (`block_bytes` of `dtype`, read only) is meant for rank p;
  // `output` gets block `rank` of every rank reduced with `op` in rank order
  // (block of rank 0 (op) block of rank 1 ...), so every rank computes the
  // simulator's bits. Requires can_reduce(dtype, op); `output` overlaps no
  // block.
  static StagedTransfer reduce_scatter(StagingArea& area, std::vector<const char*> blocks,
                                       char* output, int64_t block_bytes, c10::ScalarType dtype,
                                       ReduceOp op);
  // Every rank's `input` (`block_bytes`) end to end in `output`; the input
  // may be this rank's block of the output.
  static StagedTransfer all_gather(StagingArea& area, const char* input, char* output,
                                   int64_t block_bytes);

  int64_t chunks() const { return chunks_; }
  // Copies this rank's part of chunk `chunk` (0 .. chunks() - 1) into the area.
  void stage(int64_t chunk) const;
  // Once every peer has staged chunk `chunk`: reduces or copies it into place.
  void consume(int64_t chunk) const;

 private:
  enum class Kind { kReduceScatter, kAllGather };
  StagedTransfer(StagingArea& area, Kind kind, std::vector<const char*> inputs, char* output,
                 int64_t block_bytes, c10::ScalarType dtype, ReduceOp op);

  int64_t offset_of(int64_t chunk) const { return chunk * StagingArea::kChunkBytes; }
  int64_t bytes_in(int64_t chunk) const;
  char* slot(int owner, int64_t chunk, int reader) const;
  // Chunk `chunk` as staged by rank `owner` (this rank's from its own input).
  const char* staged_by(int owner, int64_t chunk) const;

  const StagingArea* area_;
  Kind kind_;
  std::vector<const char*> inputs_;  // by reader; an all_gather has one
  char* output_;
  int64_t block_bytes_;
  c10::ScalarType dtype_;
  ReduceOp op_;
  int64_t chunks_;
  uint64_t first_chunk_;
};

}  // namespace engine::dist::shm
