#pragma once

#include <ATen/ATen.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "engine/dist/reduce_op.h"

namespace engine::dist::gloo {

// Small all_reduces as Gloo's buffer-based ring all_gather
// (gloo::AllgatherRing) on a context of its own, then a reduction of the
// gathered tensors in rank order on every rank, so every rank ends with the
// same bits. Run in call order on one thread of its own.
//
// Why: c10d's ProcessGroupGloo runs Gloo's newer allreduce, whose unbound
// buffers handshake before the data moves; on 2 ranks of a 2-core VM a
// 4 KiB call takes ~260 us there and ~90 us through the ring. Each rank
// receives every other rank's tensor here, so only tensors of up to 64 KiB
// come this way, where the latency is the cost, not the bytes.
//
// Rings are built per byte size and reused: a ring's constructor takes Gloo
// slots, so every rank must build the same rings in the same order, which
// holds because the ranks make the same calls. Each size has two rings, used
// in turn: a faster peer may start the next call of a size as soon as this
// rank's ring has delivered, and would overwrite the gathered tensors before
// they are reduced; it cannot get two calls ahead, since every call needs
// every rank's data.
class SmallAllReducer {
 public:
  static constexpr int64_t kMaxBytes = 64 * 1024;

  // Connects a full mesh of `size` ranks through `store` (a collective call).
  SmallAllReducer(const std::shared_ptr<::gloo::transport::Device>& device,
                  const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                  std::chrono::milliseconds timeout);
  ~SmallAllReducer();

  // Whether `tensor` and `op` can come this way.
  bool handles(const at::Tensor& tensor, ReduceOp op) const;

  // Queues the reduction of `tensor` in place; the work finishes once done.
  c10::intrusive_ptr<c10d::Work> all_reduce(const at::Tensor& tensor, ReduceOp op);

 private:
  class Ring;
  class Task;

  void serve();
  Ring& ring_for(size_t bytes);

  std::shared_ptr<::gloo::rendezvous::Context> context_;
  struct RingPair {
    std::unique_ptr<Ring> rings[2];
    int next = 0;
  };
  std::map<size_t, RingPair> rings_;
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<c10::intrusive_ptr<Task>> queue_;
  bool stopping_ = false;
  std::thread server_;
};

}  // namespace engine::dist::gloo
