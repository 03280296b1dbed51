#include "engine/dist/backends/mpi/shared_window.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "engine/dist/backends/mpi/mpi_types.h"
#include "engine/dist/reduce_kernel.h"
#include "engine/dist/shared_segment.h"

namespace engine::dist::mpi {
namespace {

constexpr int kNoticeTag = 0;

// The communicator's collectives, for making segments.
SegmentCollectives collectives_of(MPI_Comm comm, int size, int world_rank) {
  auto all_gather_names = [comm, size, world_rank](const std::vector<char>& mine) {
    std::vector<char> all(mine.size() * static_cast<size_t>(size));
    const auto bytes = static_cast<int>(mine.size());
    check(MPI_Allgather(mine.data(), bytes, MPI_CHAR, all.data(), bytes, MPI_CHAR, comm),
          "staging window (MPI_Allgather)", world_rank);
    return all;
  };
  auto all_true = [comm, world_rank](bool mine) {
    int all = mine ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm),
          "staging window (MPI_Allreduce)", world_rank);
    return all == 1;
  };
  return {all_gather_names, all_true};
}

}  // namespace

// One staged operation, advanced by its MpiWork: the round for chunk k
// waits for every peer's message that its chunk k is staged (and for this
// rank's own messages to go out).
class StagedCall {
 public:
  enum class Kind { kReduceScatter, kAllGather };

  StagedCall(const SharedWindow& window, Kind kind, const at::Tensor& output,
             const at::Tensor& input, ReduceOp op, int64_t block_bytes, uint64_t first_chunk)
      : window_(&window),
        kind_(kind),
        dtype_(output.scalar_type()),
        op_(op),
        element_bytes_(static_cast<int64_t>(c10::elementSize(dtype_))),
        block_bytes_(block_bytes),
        chunks_((block_bytes + SharedWindow::kChunkBytes - 1) / SharedWindow::kChunkBytes),
        first_chunk_(first_chunk),
        input_(static_cast<const char*>(input.data_ptr())),
        output_(static_cast<char*>(output.data_ptr())) {}

  int64_t chunks() const { return chunks_; }

  // Stages chunk 0; its round's requests (none when the blocks are empty).
  MpiWork::Requests start() const {
    if (chunks_ == 0) return {};
    stage(0);
    return announced(0);
  }

  // MpiWork's NextRound: chunk next_ is staged on every rank.
  bool operator()(MpiWork::Requests& requests) {
    if (next_ >= chunks_) return false;
    consume(next_);
    if (++next_ == chunks_) return false;
    stage(next_);
    requests = announced(next_);
    return true;
  }

 private:
  int size() const { return window_->size_; }
  int rank() const { return window_->rank_; }
  int64_t offset_of(int64_t chunk) const { return chunk * SharedWindow::kChunkBytes; }
  int64_t bytes_in(int64_t chunk) const {
    return std::min(SharedWindow::kChunkBytes, block_bytes_ - offset_of(chunk));
  }
  char* slot(int owner, int64_t chunk, int reader) const {
    return window_->slot(owner, first_chunk_ + chunk, reader);
  }

  void stage(int64_t chunk) const {
    const int64_t offset = offset_of(chunk);
    if (kind_ == Kind::kAllGather) {
      std::memcpy(slot(rank(), chunk, 0), input_ + offset, bytes_in(chunk));
      return;
    }
    for (int reader = 0; reader < size(); ++reader) {
      if (reader == rank()) continue;
      std::memcpy(slot(rank(), chunk, reader), input_ + reader * block_bytes_ + offset,
                  bytes_in(chunk));
    }
  }

  MpiWork::Requests announced(int64_t chunk) const {
    std::atomic_thread_fence(std::memory_order_release);
    MpiWork::Requests requests;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank()) continue;
      requests.emplace_back();
      check(MPI_Irecv(nullptr, 0, MPI_BYTE, peer, kNoticeTag, window_->notices_, &requests.back()),
            what(), window_->world_rank_);
      requests.emplace_back();
      check(MPI_Isend(nullptr, 0, MPI_BYTE, peer, kNoticeTag, window_->notices_, &requests.back()),
            what(), window_->world_rank_);
    }
    return requests;
  }

  // A reduce_scatter reduces its own block's chunk from every rank in rank
  // order; an all_gather copies every rank's chunk into place.
  void consume(int64_t chunk) const {
    std::atomic_thread_fence(std::memory_order_acquire);
    const int64_t offset = offset_of(chunk);
    const int64_t bytes = bytes_in(chunk);
    auto staged_by = [&](int r) -> const char* {
      return r == rank() ? input_ + (kind_ == Kind::kAllGather ? 0 : r * block_bytes_) + offset
                         : slot(r, chunk, kind_ == Kind::kAllGather ? 0 : rank());
    };
    if (kind_ == Kind::kAllGather) {
      for (int r = 0; r < size(); ++r) {
        char* destination = output_ + r * block_bytes_ + offset;
        // An input that is this rank's block of the output is in place.
        if (destination != staged_by(r)) std::memcpy(destination, staged_by(r), bytes);
      }
      return;
    }
    char* result = output_ + offset;
    const int64_t count = bytes / element_bytes_;
    reduce_to(result, staged_by(0), staged_by(1), count, dtype_, op_);
    for (int r = 2; r < size(); ++r) reduce_into(result, staged_by(r), count, dtype_, op_);
  }

  const char* what() const { return kind_ == Kind::kAllGather ? "all_gather" : "reduce_scatter"; }

  const SharedWindow* window_;
  Kind kind_;
  c10::ScalarType dtype_;
  ReduceOp op_;
  int64_t element_bytes_;
  int64_t block_bytes_;
  int64_t chunks_;
  uint64_t first_chunk_;
  const char* input_;
  char* output_;
  int64_t next_ = 0;  // the chunk the current round waits for
};

std::unique_ptr<SharedWindow> SharedWindow::create(MPI_Comm comm, int world_rank) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<at::DataPtr> segments = map_segments_of_every_rank(
      2 * size * kChunkBytes, rank, size, collectives_of(comm, size, world_rank));
  if (segments.empty()) return nullptr;
  MPI_Comm notices;
  check(MPI_Comm_dup(comm, &notices), "staging window (MPI_Comm_dup)", world_rank);
  return std::unique_ptr<SharedWindow>(
      new SharedWindow(std::move(segments), notices, rank, size, world_rank));
}

SharedWindow::SharedWindow(std::vector<at::DataPtr> segments, MPI_Comm notices, int rank, int size,
                           int world_rank)
    : segments_(std::move(segments)),
      notices_(notices),
      rank_(rank),
      size_(size),
      world_rank_(world_rank) {}

SharedWindow::~SharedWindow() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&notices_);
}

char* SharedWindow::slot(int owner, uint64_t chunk, int reader) const {
  const auto half = static_cast<int64_t>(chunk % 2);
  return static_cast<char*>(segments_[owner].get()) + (half * size_ + reader) * kChunkBytes;
}

WorkPtr SharedWindow::reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op,
                                     WaitPolicy policy) {
  StagedCall call(*this, StagedCall::Kind::kReduceScatter, output, input, op,
                  static_cast<int64_t>(output.nbytes()), next_chunk_);
  return start(std::move(call), {output, input}, "reduce_scatter", policy);
}

WorkPtr SharedWindow::all_gather(at::Tensor& output, const at::Tensor& input, WaitPolicy policy) {
  StagedCall call(*this, StagedCall::Kind::kAllGather, output, input, ReduceOp::kSum,
                  static_cast<int64_t>(input.nbytes()), next_chunk_);
  return start(std::move(call), {output, input}, "all_gather", policy);
}

WorkPtr SharedWindow::start(StagedCall call, MpiWork::Tensors keep_alive, const char* what,
                            WaitPolicy policy) {
  if (in_flight_) in_flight_->wait();
  next_chunk_ += call.chunks();
  MpiWork::Requests first_round = call.start();
  in_flight_ = MpiWork::in_rounds(std::move(first_round), std::move(keep_alive), std::move(call),
                                  what, world_rank_, policy);
  return in_flight_;
}

}  // namespace engine::dist::mpi
