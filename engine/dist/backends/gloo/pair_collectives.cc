#include "engine/dist/backends/gloo/pair_collectives.h"

#include <ATen/MemoryOverlap.h>
#include <gloo/allgather_ring.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/dist/reduce_kernel.h"

namespace engine::dist::gloo {
namespace {

// A training loop reduces the same few sizes; past this many sizes, all rings
// are dropped at once, on every rank alike.
constexpr size_t kMaxRings = 64;

// A tensor over `bytes`, for a gather ring.
at::Tensor bytes_of(const std::vector<char>& bytes) {
  return at::from_blob(const_cast<char*>(bytes.data()), {static_cast<int64_t>(bytes.size())},
                       at::kByte);
}

}  // namespace

// Gloo's ring all_gather of `bytes` per rank, bound to buffers of its own
// (Gloo registers them with its transport).
class PairCollectives::Ring {
 public:
  Ring(const std::shared_ptr<::gloo::Context>& context, size_t bytes)
      : input_(bytes),
        gathered_(bytes * context->size),
        algorithm_(context, {input_.data()}, gathered_.data(), static_cast<int>(bytes)) {}
  // Gloo's algorithms may throw from their destructors; this one only frees memory.
  ~Ring() noexcept {}

  // The ranks' `pieces` (joined, input_'s size in all), one rank after the
  // other in rank order.
  const uint8_t* gather(const std::vector<at::Tensor>& pieces) {
    uint8_t* end = input_.data();
    for (const at::Tensor& piece : pieces) {
      std::memcpy(end, piece.data_ptr(), piece.nbytes());
      end += piece.nbytes();
    }
    algorithm_.run();
    return gathered_.data();
  }

 private:
  std::vector<uint8_t> input_;
  std::vector<uint8_t> gathered_;
  ::gloo::AllgatherRing<uint8_t> algorithm_;
};

PairCollectives::PairCollectives(std::shared_ptr<::gloo::transport::Device> device,
                                 std::shared_ptr<::gloo::rendezvous::Store> store, int rank,
                                 int size, std::chrono::milliseconds timeout, bool may_spin)
    : context_(std::make_shared<::gloo::rendezvous::Context>(rank, size)) {
  context_->setTimeout(timeout);
  context_->connectFullMesh(std::move(store), device);
  read_mode_ =
      std::make_shared<ReadMode>(may_spin, [this](bool spin) { use_synchronous_pairs(spin); });
  chunked_ = std::make_unique<ChunkedRing>(context_, *read_mode_);
  queue_ = std::make_unique<CallQueue>([this] { read_mode_->refresh(); });
}

// In synchronous mode the thread that waits for a message reads it from the
// socket itself, instead of Gloo's device thread reading it and waking the
// waiter: one thread hand-off fewer per message, which is most of a small
// call's time. It is safe here because one thread (the CallQueue's) runs every call on
// these pairs, and no write can wait on a peer that is itself waiting to
// write: the gather rings and the chunked ring's all_reduce and all_gather
// keep at most one unread message of a rank's on each connection, of at most
// ChunkedRing::kChunkBytes, which the socket buffers hold (see ChunkedRing);
// a broadcast's writes go along a chain, which has no cycle. A peer that goes
// silent still ends the call: the sockets' timeouts are the context's, and
// Gloo's busy poll (`spin`) keeps to them too.
void PairCollectives::use_synchronous_pairs(bool spin) {
  for (int peer = 0; peer < context_->size; ++peer) {
    if (peer != context_->rank) context_->getPair(peer)->setSync(/*sync=*/true, spin);
  }
}

PairCollectives::~PairCollectives() = default;

bool PairCollectives::takes_all_gather(const at::Tensor& output, const at::Tensor& input) const {
  return is_plain(input) && is_plain(output) &&
         output.nbytes() == input.nbytes() * static_cast<size_t>(context_->size);
}

bool PairCollectives::takes_reduce_scatter(const at::Tensor& output,
                                           const std::vector<at::Tensor>& blocks,
                                           ReduceOp op) const {
  auto fits = [&](const at::Tensor& block) {
    return is_plain(block) && block.scalar_type() == output.scalar_type() &&
           block.nbytes() == output.nbytes();
  };
  return is_plain(output) && can_reduce(output.scalar_type(), op) &&
         blocks.size() == static_cast<size_t>(context_->size) &&
         std::all_of(blocks.begin(), blocks.end(), fits);
}

c10::intrusive_ptr<c10d::Work> PairCollectives::reduce_scatter(
    const at::Tensor& output, const std::vector<at::Tensor>& blocks, ReduceOp op) {
  const int rank = context_->rank;
  const int ranks = context_->size;
  if (output.nbytes() * ranks <= kMaxGatherRingBytes) {
    return gather(blocks, [output, op, rank, ranks](const uint8_t* gathered, size_t bytes) {
      const size_t block = output.nbytes();
      std::memcpy(output.data_ptr(), gathered + rank * block, block);
      for (int from = 1; from < ranks; ++from) {
        reduce_into(output.data_ptr(), gathered + from * bytes + rank * block, output.numel(),
                    output.scalar_type(), op);
      }
    });
  }
  return queue_->enqueue([this, output, blocks, op] {
    // Both ways read every block to the end: one under the output needs a copy.
    std::vector<at::Tensor> sources;
    for (const at::Tensor& block : blocks) {
      const bool apart = at::get_overlap_status(output, block) == at::MemOverlapStatus::No;
      sources.push_back(apart ? block : block.clone());
    }
    std::vector<const char*> pointers;
    for (const at::Tensor& source : sources) {
      pointers.push_back(static_cast<const char*>(source.data_ptr()));
    }
    auto* result = static_cast<char*>(output.data_ptr());
    if (StagedPairs* staged = staging_for(output.nbytes())) {
      staged->run(shm::StagedTransfer::reduce_scatter(staged->area(), std::move(pointers), result,
                                                      static_cast<int64_t>(output.nbytes()),
                                                      output.scalar_type(), op));
      return;
    }
    chunked_->reduce_scatter(std::vector<const void*>(pointers.begin(), pointers.end()), result,
                             output.numel(), output.scalar_type(), op);
  });
}

c10::intrusive_ptr<c10d::Work> PairCollectives::all_reduce(const at::Tensor& tensor, ReduceOp op) {
  if (tensor.nbytes() > kMaxGatherRingBytes) {
    return queue_->enqueue([this, tensor, op] {
      chunked_->all_reduce(tensor.data_ptr(), tensor.numel(), tensor.scalar_type(), op);
    });
  }
  const int ranks = context_->size;
  return gather({tensor}, [tensor, op, ranks](const uint8_t* gathered, size_t bytes) {
    std::memcpy(tensor.data_ptr(), gathered, bytes);
    for (int rank = 1; rank < ranks; ++rank) {
      reduce_into(tensor.data_ptr(), gathered + rank * bytes, tensor.numel(), tensor.scalar_type(),
                  op);
    }
  });
}

c10::intrusive_ptr<c10d::Work> PairCollectives::broadcast(const at::Tensor& tensor, int root) {
  return queue_->enqueue(
      [this, tensor, root] { chunked_->broadcast(tensor.data_ptr(), tensor.nbytes(), root); });
}

c10::intrusive_ptr<c10d::Work> PairCollectives::all_gather(const at::Tensor& output,
                                                           const at::Tensor& input) {
  if (input.nbytes() <= kMaxGatherRingBytes) {
    return gather({input}, [output](const uint8_t* gathered, size_t bytes) {
      std::memcpy(output.data_ptr(), gathered, output.nbytes());
    });
  }
  return queue_->enqueue([this, output, input] {
    const size_t bytes = input.nbytes();
    if (StagedPairs* staged = staging_for(bytes)) {
      staged->run(shm::StagedTransfer::all_gather(
          staged->area(), static_cast<const char*>(input.data_ptr()),
          static_cast<char*>(output.data_ptr()), static_cast<int64_t>(bytes)));
      return;
    }
    auto* gathered = static_cast<uint8_t*>(output.data_ptr());
    uint8_t* mine = gathered + context_->rank * bytes;
    if (mine != input.data_ptr()) std::memcpy(mine, input.data_ptr(), bytes);
    chunked_->all_gather(gathered, bytes);
  });
}

c10::intrusive_ptr<c10d::Work> PairCollectives::gather(std::vector<at::Tensor> pieces,
                                                       UseGathered use) {
  return queue_->enqueue([this, pieces = std::move(pieces), use = std::move(use)] {
    size_t bytes = 0;
    for (const at::Tensor& piece : pieces) bytes += piece.nbytes();
    use(ring_for(bytes).gather(pieces), bytes);
  });
}

StagedPairs* PairCollectives::staging_for(size_t block_bytes) {
  const int ranks = context_->size;
  if (ranks < 2 || ranks > kMaxStagedRanks || block_bytes < kMinStagedBlockBytes) return nullptr;
  if (staging_tried_) return staged_.get();
  staging_tried_ = true;
  auto all_gather_names = [this, ranks](const std::vector<char>& mine) {
    const uint8_t* all = ring_for(mine.size()).gather({bytes_of(mine)});
    return std::vector<char>(all, all + mine.size() * ranks);
  };
  auto all_true = [this, ranks](bool mine) {
    const std::vector<char> flag = {mine ? char{1} : char{0}};
    const uint8_t* all = ring_for(flag.size()).gather({bytes_of(flag)});
    return std::all_of(all, all + ranks, [](uint8_t each) { return each == 1; });
  };
  auto area = shm::StagingArea::create(context_->rank, ranks, {all_gather_names, all_true});
  if (area) staged_ = std::make_unique<StagedPairs>(context_, std::move(area), *read_mode_);
  return staged_.get();
}

PairCollectives::Ring& PairCollectives::ring_for(size_t bytes) {
  if (rings_.size() >= kMaxRings && rings_.count(bytes) == 0) rings_.clear();
  RingPair& pair = rings_[bytes];
  std::unique_ptr<Ring>& ring = pair.rings[pair.next];
  pair.next = 1 - pair.next;
  if (!ring) ring = std::make_unique<Ring>(context_, bytes);
  return *ring;
}

}  // namespace engine::dist::gloo
