#include "engine/dist/backends/gloo/chunked_ring.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "engine/dist/reduce_kernel.h"

namespace engine::dist::gloo {
namespace {

// Bytes [begin, end) of the data.
struct Span {
  size_t begin;
  size_t end;
  size_t size() const { return end - begin; }
};

// The ring's `part`-th of `count` elements of `item` bytes, element-aligned.
Span part_of(int part, int parts, int64_t count, size_t item) {
  auto edge = [&](int p) { return static_cast<size_t>(count * p / parts) * item; };
  return {edge(part), edge(part + 1)};
}

int wrap_rank(int rank, int size) { return ((rank % size) + size) % size; }

// Alternates sending chunks of `out` and receiving chunks of `in`, so that
// at most one chunk of this rank's waits unread on the connection.
template <typename Send, typename Receive>
void in_chunks(Span out, Span in, Send send, Receive receive) {
  const size_t longest = std::max(out.size(), in.size());
  for (size_t done = 0; done < longest; done += ChunkedRing::kChunkBytes) {
    if (done < out.size()) {
      send(out.begin + done, std::min(ChunkedRing::kChunkBytes, out.size() - done));
    }
    if (done < in.size()) {
      receive(in.begin + done, std::min(ChunkedRing::kChunkBytes, in.size() - done));
    }
  }
}

// Buffers over `data` for sending to the ring's next rank and receiving from
// its previous one, at `slot`.
std::unique_ptr<::gloo::transport::Buffer> to_next(::gloo::Context& context, int slot, void* data,
                                                   size_t bytes) {
  return context.getPair(wrap_rank(context.rank + 1, context.size))
      ->createSendBuffer(slot, data, bytes);
}

std::unique_ptr<::gloo::transport::Buffer> from_previous(::gloo::Context& context, int slot,
                                                         void* data, size_t bytes) {
  return context.getPair(wrap_rank(context.rank - 1, context.size))
      ->createRecvBuffer(slot, data, bytes);
}

void send_chunk(::gloo::transport::Buffer& out, size_t offset, size_t bytes, size_t remote) {
  out.send(offset, bytes, remote);
  out.waitSend();
}

// Reads the next message into `in`, waiting the way the callers want now.
void receive_chunk(ReadMode& read_mode, ::gloo::transport::Buffer& in) {
  read_mode.refresh();
  in.waitRecv();
}

// Passes finished parts of `data` round the ring into place: at step s this
// rank sends part (first - s) and receives part (first - s - 1).
template <typename PartOf>
void circulate(::gloo::Context& context, ReadMode& read_mode, int slot, void* data, size_t bytes,
               PartOf part, int first) {
  auto to_place = to_next(context, slot, data, bytes);
  auto into_place = from_previous(context, slot, data, bytes);
  for (int step = 0; step < context.size - 1; ++step) {
    in_chunks(
        part(first - step), part(first - step - 1),
        [&](size_t offset, size_t size) { send_chunk(*to_place, offset, size, offset); },
        [&](size_t, size_t) { receive_chunk(read_mode, *into_place); });
  }
}

}  // namespace

ChunkedRing::ChunkedRing(std::shared_ptr<::gloo::Context> context, ReadMode& read_mode)
    : context_(std::move(context)),
      read_mode_(read_mode),
      reduce_slot_(context_->nextSlot()),
      gather_slot_(context_->nextSlot()),
      scratch_(kChunkBytes) {
  size_send_buffers();
}

// Gloo sizes a pair's send buffer to the largest message sent on it so far.
// Were the first large call an all_reduce of 256 KiB, its 128 KiB messages
// would leave the buffer too small for the 256 KiB chunks of every later call,
// whose writes would then wait on the peer in mid-message, taking several
// times as long. One message of the largest size fixes the size for good.
// Rank 0 writes first and every other rank reads first, so no write waits on
// a peer that is itself writing.
void ChunkedRing::size_send_buffers() {
  std::vector<uint8_t> message(kBroadcastChunkBytes);
  auto out = to_next(*context_, gather_slot_, message.data(), message.size());
  auto in = from_previous(*context_, gather_slot_, message.data(), message.size());
  if (context_->rank == 0) send_chunk(*out, 0, message.size(), 0);
  receive_chunk(read_mode_, *in);
  if (context_->rank != 0) send_chunk(*out, 0, message.size(), 0);
}

template <typename PartOf>
void ChunkedRing::reduce_round(uint8_t* data, size_t bytes, c10::ScalarType dtype, ReduceOp op,
                               PartOf part, int first) {
  const size_t item = c10::elementSize(dtype);
  auto to_scratch = to_next(*context_, reduce_slot_, data, bytes);
  auto into_scratch = from_previous(*context_, reduce_slot_, scratch_.data(), scratch_.size());
  for (int step = 0; step < context_->size - 1; ++step) {
    in_chunks(
        part(first - step), part(first - step - 1),
        [&](size_t offset, size_t size) { send_chunk(*to_scratch, offset, size, 0); },
        [&](size_t offset, size_t size) {
          receive_chunk(read_mode_, *into_scratch);
          reduce_into(data + offset, scratch_.data(), static_cast<int64_t>(size / item), dtype, op);
        });
  }
}

void ChunkedRing::all_reduce(void* data, int64_t count, c10::ScalarType dtype, ReduceOp op) {
  const int ranks = context_->size;
  const int rank = context_->rank;
  const size_t item = c10::elementSize(dtype);
  auto part = [&](int p) { return part_of(wrap_rank(p, ranks), ranks, count, item); };
  // This rank's part (rank + 1) ends with everyone's sum; then the finished
  // parts travel round the ring into place.
  reduce_round(static_cast<uint8_t*>(data), static_cast<size_t>(count) * item, dtype, op, part,
               rank);
  circulate(*context_, read_mode_, gather_slot_, data, static_cast<size_t>(count) * item, part,
            rank + 1);
}

// Step s sends the partial sum of block (rank - 1 - s), which step s - 1
// received (the input itself at step 0), and receives block (rank - 2 - s),
// adding this rank's input to it. The partial sums alternate between
// `output` and partial_ so that the last one, block `rank`, lands in
// `output`.
void ChunkedRing::reduce_scatter(const std::vector<const void*>& blocks, void* output,
                                 int64_t count_per_rank, c10::ScalarType dtype, ReduceOp op) {
  const int ranks = context_->size;
  const int rank = context_->rank;
  const size_t item = c10::elementSize(dtype);
  const size_t block = static_cast<size_t>(count_per_rank) * item;
  auto input_for = [&](int p) { return static_cast<const uint8_t*>(blocks[wrap_rank(p, ranks)]); };
  if (ranks == 1) std::memcpy(output, blocks[0], block);
  if (ranks > 2 && partial_.size() < block) partial_.resize(block);
  auto sums_of_step = [&](int step) {
    return (ranks - 2 - step) % 2 == 0 ? static_cast<uint8_t*>(output) : partial_.data();
  };
  auto into_scratch = from_previous(*context_, reduce_slot_, scratch_.data(), scratch_.size());
  for (int step = 0; step < ranks - 1; ++step) {
    const uint8_t* sent = step == 0 ? input_for(rank - 1) : sums_of_step(step - 1);
    auto out = to_next(*context_, reduce_slot_, const_cast<uint8_t*>(sent), block);
    const uint8_t* mine = input_for(rank - 2 - step);
    uint8_t* sums = sums_of_step(step);
    for (size_t done = 0; done < block; done += kChunkBytes) {
      const size_t size = std::min(kChunkBytes, block - done);
      send_chunk(*out, done, size, 0);
      receive_chunk(read_mode_, *into_scratch);
      reduce_to(sums + done, mine + done, scratch_.data(), static_cast<int64_t>(size / item), dtype,
                op);
    }
  }
}

void ChunkedRing::all_gather(void* gathered, size_t bytes_per_rank) {
  const int ranks = context_->size;
  auto part = [&](int p) {
    const size_t begin = static_cast<size_t>(wrap_rank(p, ranks)) * bytes_per_rank;
    return Span{begin, begin + bytes_per_rank};
  };
  circulate(*context_, read_mode_, gather_slot_, gathered, bytes_per_rank * ranks, part,
            context_->rank);
}

void ChunkedRing::broadcast(void* data, size_t bytes, int root) {
  const int position = wrap_rank(context_->rank - root, context_->size);
  std::unique_ptr<::gloo::transport::Buffer> in;
  std::unique_ptr<::gloo::transport::Buffer> out;
  if (position > 0) in = from_previous(*context_, gather_slot_, data, bytes);
  if (position < context_->size - 1) out = to_next(*context_, gather_slot_, data, bytes);
  for (size_t offset = 0; offset < bytes; offset += kBroadcastChunkBytes) {
    if (in) receive_chunk(read_mode_, *in);
    if (out) send_chunk(*out, offset, std::min(kBroadcastChunkBytes, bytes - offset), offset);
  }
}

}  // namespace engine::dist::gloo
