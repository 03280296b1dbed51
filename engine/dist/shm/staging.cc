#include "engine/dist/shm/staging.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/dist/reduce_kernel.h"

namespace engine::dist::shm {

std::unique_ptr<StagingArea> StagingArea::create(int rank, int size,
                                                 const SegmentCollectives& collectives) {
  std::vector<at::DataPtr> segments =
      map_segments_of_every_rank(2 * size * kChunkBytes, rank, size, collectives);
  if (segments.empty()) return nullptr;
  return std::unique_ptr<StagingArea>(new StagingArea(std::move(segments), rank, size));
}

StagingArea::StagingArea(std::vector<at::DataPtr> segments, int rank, int size)
    : segments_(std::move(segments)), rank_(rank), size_(size) {}

uint64_t StagingArea::take_chunks(int64_t chunks) {
  const uint64_t first = next_chunk_;
  next_chunk_ += static_cast<uint64_t>(chunks);
  return first;
}

char* StagingArea::slot(int owner, uint64_t chunk, int reader) const {
  const auto half = static_cast<int64_t>(chunk % 2);
  return static_cast<char*>(segments_[owner].get()) + (half * size_ + reader) * kChunkBytes;
}

StagedTransfer StagedTransfer::reduce_scatter(StagingArea& area, std::vector<const char*> blocks,
                                              char* output, int64_t block_bytes,
                                              c10::ScalarType dtype, ReduceOp op) {
  return StagedTransfer(area, Kind::kReduceScatter, std::move(blocks), output, block_bytes, dtype,
                        op);
}

StagedTransfer StagedTransfer::all_gather(StagingArea& area, const char* input, char* output,
                                          int64_t block_bytes) {
  return StagedTransfer(area, Kind::kAllGather, {input}, output, block_bytes, at::kByte,
                        ReduceOp::kSum);
}

StagedTransfer::StagedTransfer(StagingArea& area, Kind kind, std::vector<const char*> inputs,
                               char* output, int64_t block_bytes, c10::ScalarType dtype,
                               ReduceOp op)
    : area_(&area),
      kind_(kind),
      inputs_(std::move(inputs)),
      output_(output),
      block_bytes_(block_bytes),
      dtype_(dtype),
      op_(op),
      chunks_((block_bytes + StagingArea::kChunkBytes - 1) / StagingArea::kChunkBytes),
      first_chunk_(area.take_chunks(chunks_)) {}

int64_t StagedTransfer::bytes_in(int64_t chunk) const {
  return std::min(StagingArea::kChunkBytes, block_bytes_ - offset_of(chunk));
}

char* StagedTransfer::slot(int owner, int64_t chunk, int reader) const {
  return area_->slot(owner, first_chunk_ + static_cast<uint64_t>(chunk), reader);
}

void StagedTransfer::stage(int64_t chunk) const {
  const int rank = area_->rank();
  const int64_t offset = offset_of(chunk);
  if (kind_ == Kind::kAllGather) {
    std::memcpy(slot(rank, chunk, 0), inputs_[0] + offset, bytes_in(chunk));
  } else {
    for (int reader = 0; reader < area_->size(); ++reader) {
      if (reader == rank) continue;
      std::memcpy(slot(rank, chunk, reader), inputs_[reader] + offset, bytes_in(chunk));
    }
  }
  std::atomic_thread_fence(std::memory_order_release);
}

const char* StagedTransfer::staged_by(int owner, int64_t chunk) const {
  const int rank = area_->rank();
  const bool gathers = kind_ == Kind::kAllGather;
  if (owner == rank) return inputs_[gathers ? 0 : rank] + offset_of(chunk);
  return slot(owner, chunk, gathers ? 0 : rank);
}

void StagedTransfer::consume(int64_t chunk) const {
  std::atomic_thread_fence(std::memory_order_acquire);
  const int64_t offset = offset_of(chunk);
  const int64_t bytes = bytes_in(chunk);
  const int ranks = area_->size();
  if (kind_ == Kind::kAllGather) {
    for (int r = 0; r < ranks; ++r) {
      char* destination = output_ + r * block_bytes_ + offset;
      // An input that is this rank's block of the output is in place.
      if (destination != staged_by(r, chunk)) std::memcpy(destination, staged_by(r, chunk), bytes);
    }
    return;
  }
  char* result = output_ + offset;
  const int64_t count = bytes / static_cast<int64_t>(c10::elementSize(dtype_));
  reduce_to(result, staged_by(0, chunk), staged_by(1, chunk), count, dtype_, op_);
  for (int r = 2; r < ranks; ++r) reduce_into(result, staged_by(r, chunk), count, dtype_, op_);
}

}  // namespace engine::dist::shm
