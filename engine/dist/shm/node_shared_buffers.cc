#include "engine/dist/shm/node_shared_buffers.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/dist/forwarding_backend.h"
#include "engine/dist/reduce_kernel.h"

namespace engine::dist::shm {
namespace {

constexpr int64_t kLine = 64;  // one counter per cache line
// A slice is what one rank claims and reduces at a time; several per rank
// let a rank that arrives early take over part of a late one's share.
constexpr int64_t kSliceBytes = int64_t{1} << 20;
// Reduced, then copied to the peers, while still in cache.
constexpr int64_t kChunkBytes = int64_t{64} << 10;

// Where things are in each rank's segment: the counters (only group rank
// 0's are used), then the data. Every rank computes the same layout.
struct Layout {
  int ranks;
  int64_t numel;
  int64_t element_size;
  int64_t slices;

  Layout(int ranks, int64_t numel, int64_t element_size)
      : ranks(ranks),
        numel(numel),
        element_size(element_size),
        slices(std::max<int64_t>(ranks, (numel * element_size + kSliceBytes - 1) / kSliceBytes)) {}

  // Line 0: the futex word; then each rank's last arrival; then each slice's
  // last claim; then the count of slices reduced, over all rounds.
  int64_t arrival_line(int rank) const { return 1 + rank; }
  int64_t claim_line(int64_t slice) const { return 1 + ranks + slice; }
  int64_t done_line() const { return 1 + ranks + slices; }
  int64_t header_bytes() const { return kLine * (done_line() + 1); }
  int64_t segment_bytes() const { return header_bytes() + numel * element_size; }
  int64_t slice_begin(int64_t slice) const { return numel * slice / slices; }
};

int futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word is in memory that other processes map.
  return static_cast<int>(
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0));
}

timespec as_timespec(std::chrono::milliseconds d) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(d);
  const auto nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(d - seconds);
  return timespec{static_cast<time_t>(seconds.count()), static_cast<long>(nanoseconds.count())};
}

// The state behind one rank's buffer: every rank's segment mapped here, and
// this rank's count of rounds. Owned by the buffer's storage.
struct SharedBuffer {
  Layout layout;
  int rank;
  std::vector<int> world_ranks;  // by group rank, for messages
  c10::ScalarType dtype;
  const Backend* transport;                // of the group's backend
  std::chrono::milliseconds default_wait;  // the backend's node_shared_wait()
  std::vector<at::DataPtr> segments;       // by group rank; this rank's own among them
  uint64_t rounds = 0;

  SharedBuffer(Layout layout, int rank, std::vector<int> world_ranks, c10::ScalarType dtype,
               const Backend& backend, std::vector<at::DataPtr> segments)
      : layout(layout),
        rank(rank),
        world_ranks(std::move(world_ranks)),
        dtype(dtype),
        transport(&backend.transport()),
        default_wait(*backend.node_shared_wait()),
        segments(std::move(segments)) {}

  char* data_of(int r) const {
    return static_cast<char*>(segments[r].get()) + layout.header_bytes();
  }
  template <typename T>
  std::atomic<T>* line(int64_t index) const {
    return reinterpret_cast<std::atomic<T>*>(static_cast<char*>(segments[0].get()) + kLine * index);
  }
  std::atomic<uint32_t>* events() const { return line<uint32_t>(0); }
  std::atomic<uint64_t>* arrival(int r) const { return line<uint64_t>(layout.arrival_line(r)); }
  std::atomic<uint64_t>* claim(int64_t s) const { return line<uint64_t>(layout.claim_line(s)); }
  std::atomic<uint64_t>* done() const { return line<uint64_t>(layout.done_line()); }

  void wake_all() const {
    events()->fetch_add(1, std::memory_order_release);
    futex(events(), FUTEX_WAKE, INT_MAX, nullptr);
  }
};

void delete_shared_buffer(void* context) { delete static_cast<SharedBuffer*>(context); }

SharedBuffer* shared_buffer_of(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return nullptr;
  const at::DataPtr& data_ptr = t.storage().data_ptr();
  if (data_ptr.get_deleter() != &delete_shared_buffer) return nullptr;
  auto* buffer = static_cast<SharedBuffer*>(data_ptr.get_context());
  const bool whole = t.data_ptr() == buffer->data_of(buffer->rank) &&
                     t.numel() == buffer->layout.numel && t.is_contiguous() &&
                     t.scalar_type() == buffer->dtype;
  return whole ? buffer : nullptr;
}

// One all_reduce round on a shared buffer. The reduction runs in whichever
// of wait() or is_completed() finds every rank arrived: the rank claims the
// slices no rank took yet, starting at its own share.
class SharedAllReduce : public Work {
 public:
  SharedAllReduce(at::Tensor data, SharedBuffer* buffer, uint64_t round, ReduceOp op)
      : data_(std::move(data)),
        buffer_(buffer),
        round_(round),
        done_after_(round * static_cast<uint64_t>(buffer->layout.slices)),
        op_(op) {}

  bool is_completed() override { return advance(); }

  void wait(std::chrono::milliseconds timeout) override {
    if (timeout == kNoTimeout) timeout = buffer_->default_wait;
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const uint32_t seen = buffer_->events()->load(std::memory_order_acquire);
      if (advance()) return;
      const auto left = timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::steady_clock::now() - start);
      if (left <= std::chrono::milliseconds::zero()) throw timed_out(timeout);
      const timespec slice =
          as_timespec(std::min<std::chrono::milliseconds>(left, std::chrono::hours(1)));
      futex(buffer_->events(), FUTEX_WAIT, seen, &slice);
    }
  }

  std::exception_ptr exception() override { return nullptr; }

 private:
  bool all_arrived() const {
    for (int r = 0; r < buffer_->layout.ranks; ++r) {
      if (buffer_->arrival(r)->load(std::memory_order_acquire) < round_) return false;
    }
    return true;
  }

  bool finished() const { return buffer_->done()->load(std::memory_order_acquire) >= done_after_; }

  bool advance() {
    if (finished()) return true;
    if (!all_arrived()) return false;
    const int64_t slices = buffer_->layout.slices;
    const int64_t first = slices * buffer_->rank / buffer_->layout.ranks;
    for (int64_t k = 0; k < slices; ++k) {
      const int64_t slice = (first + k) % slices;
      uint64_t unclaimed = round_ - 1;
      if (!buffer_->claim(slice)->compare_exchange_strong(unclaimed, round_,
                                                          std::memory_order_acq_rel)) {
        continue;
      }
      reduce_slice(slice);
      if (buffer_->done()->fetch_add(1, std::memory_order_acq_rel) + 1 == done_after_) {
        buffer_->wake_all();
      }
    }
    return finished();
  }

  // Group rank 0's copy accumulates, in rank order, a chunk at a time; the
  // result goes to every other rank's copy while the chunk is in cache.
  void reduce_slice(int64_t slice) const {
    const Layout& layout = buffer_->layout;
    const int64_t end = layout.slice_begin(slice + 1);
    const int64_t chunk = std::max<int64_t>(1, kChunkBytes / layout.element_size);
    for (int64_t begin = layout.slice_begin(slice); begin < end; begin += chunk) {
      const int64_t count = std::min(chunk, end - begin);
      const int64_t offset = begin * layout.element_size;
      char* acc = buffer_->data_of(0) + offset;
      for (int r = 1; r < layout.ranks; ++r) {
        reduce_into(acc, buffer_->data_of(r) + offset, count, buffer_->dtype, op_);
      }
      for (int r = 1; r < layout.ranks; ++r) {
        std::memcpy(buffer_->data_of(r) + offset, acc, count * layout.element_size);
      }
    }
  }

  Timeout timed_out(std::chrono::milliseconds timeout) const {
    std::string missing;
    for (int r = 0; r < buffer_->layout.ranks; ++r) {
      if (buffer_->arrival(r)->load(std::memory_order_acquire) < round_) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(buffer_->world_ranks[r]);
      }
    }
    const std::string why =
        missing.empty() ? "a rank stopped in the middle of its share of the reduction (died?)"
                        : "ranks [" + missing + "] never made the matching call (or died)";
    return Timeout(on_rank(buffer_->world_ranks[buffer_->rank],
                           "all_reduce on a node-shared buffer did not complete within " +
                               std::to_string(timeout.count()) + " ms: " + why +
                               "; look at those ranks' logs"));
  }

  at::Tensor data_;  // keeps the buffer alive
  SharedBuffer* buffer_;
  uint64_t round_;
  uint64_t done_after_;  // the count of slices reduced once this round is done
  ReduceOp op_;
};

// The all_reduce of `data` through shared memory when `data` is a whole
// buffer from zeros_in_shared_memory on the group `transport` serves and `op`
// applies to its dtype; nullptr otherwise.
WorkPtr shared_all_reduce(const at::Tensor& data, ReduceOp op, const Backend& transport) {
  SharedBuffer* buffer = shared_buffer_of(data);
  if (buffer == nullptr || buffer->transport != &transport || !can_reduce(buffer->dtype, op)) {
    return nullptr;
  }
  const uint64_t round = ++buffer->rounds;
  buffer->arrival(buffer->rank)->store(round, std::memory_order_release);
  buffer->wake_all();
  return std::make_shared<SharedAllReduce>(data, buffer, round, op);
}

class NodeSharedBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

  WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) override {
    if (WorkPtr shared = shared_all_reduce(tensor, op, inner().transport())) return shared;
    return ForwardingBackend::all_reduce(tensor, op);
  }

  std::shared_ptr<Backend> split(const std::vector<int>& ranks) override {
    std::shared_ptr<Backend> part = inner().split(ranks);
    return part ? with_node_shared_buffers(std::move(part)) : nullptr;
  }
};

}  // namespace

bool is_node_shared(const at::Tensor& t) { return shared_buffer_of(t) != nullptr; }

at::Tensor zeros_in_shared_memory(int64_t numel, c10::ScalarType dtype, int rank,
                                  std::vector<int> world_ranks, const Backend& backend,
                                  const SegmentCollectives& collectives) {
  const Layout layout(static_cast<int>(world_ranks.size()), numel, c10::elementSize(dtype));
  std::vector<at::DataPtr> segments =
      map_segments_of_every_rank(layout.segment_bytes(), rank, layout.ranks, collectives);
  if (segments.empty()) return {};

  auto* buffer =
      new SharedBuffer(layout, rank, std::move(world_ranks), dtype, backend, std::move(segments));
  const int64_t bytes = numel * layout.element_size;
  at::DataPtr data(buffer->data_of(rank), buffer, &delete_shared_buffer, at::kCPU);
  at::Storage storage(at::Storage::use_byte_size_t(), bytes, std::move(data), nullptr, false);
  return at::empty({0}, at::TensorOptions().dtype(dtype)).set_(storage, 0, {numel}, {1});
}

std::shared_ptr<Backend> with_node_shared_buffers(std::shared_ptr<Backend> inner) {
  return std::make_shared<NodeSharedBackend>(std::move(inner));
}

}  // namespace engine::dist::shm
