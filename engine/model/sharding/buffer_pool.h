#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace engine::model::sharding {

// Memory that a sharding wrapper's per-step buffers are taken from and
// given back to: the gathered parameters, the all-gather's and the
// reduce-scatter's blocks, the sharded gradients.
//
// Why: LibTorch's CPU allocator passes every large block to the C library,
// which maps fresh pages for it and unmaps them when it is freed. Those
// buffers are made and freed for every unit in every step, so each step
// paid a page fault for every 4 KiB of them, a large share of a sharded
// step. CUDA's caching allocator
// keeps freed blocks for the GPU; this pool does it for these buffers on
// the CPU (every size: one rule, and the small buffers of tests take the
// same path as a large model's). Other devices' buffers come from their
// own allocator.
//
// Bound: a freed buffer is kept for the next request of exactly its size
// (the wrappers ask for the same sizes every step; no splitting, no
// rounding), and nothing kept is freed until the pool goes. A buffer is
// made only when none of its size is kept, so for every size the pool holds
// at most as many buffers as were once in use together.
//
// Thread-safe: a buffer may be freed on any thread (autograd's, a
// backend's). Buffers may outlive the pool; they are then freed, not kept.
class BufferPool {
 public:
  BufferPool();
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // Uninitialised memory for `bytes` on `device`.
  at::DataPtr allocate(size_t bytes, c10::Device device);
  // An uninitialised contiguous tensor on that memory.
  at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options);

  struct Stats {
    int64_t in_use = 0;     // bytes of the pool's buffers alive now
    int64_t kept = 0;       // bytes freed and kept for reuse
    int64_t reused = 0;     // requests served by a kept buffer
    int64_t allocated = 0;  // requests that allocated
  };
  Stats stats() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace engine::model::sharding
