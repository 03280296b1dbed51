#include "engine/model/sharding/buffer_pool.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace engine::model::sharding {

struct BufferPool::State : std::enable_shared_from_this<State> {
  // A buffer out of the pool: what the caller's DataPtr points at.
  struct Lease {
    std::shared_ptr<State> state;
    size_t bytes;
    at::DataPtr data;
  };

  mutable std::mutex mutex;
  bool open = true;
  std::unordered_map<size_t, std::vector<at::DataPtr>> kept;  // by size, last freed last
  Stats stats;

  static void release(void* context) {
    std::unique_ptr<Lease> lease(static_cast<Lease*>(context));
    lease->state->give_back(lease->bytes, std::move(lease->data));
  }

  at::DataPtr lend(size_t bytes) {
    at::DataPtr data = take(bytes);
    void* pointer = data.get();
    auto* lease = new Lease{shared_from_this(), bytes, std::move(data)};
    return at::DataPtr(pointer, lease, &State::release, c10::Device(c10::kCPU));
  }

  at::DataPtr take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    stats.in_use += static_cast<int64_t>(bytes);
    auto found = kept.find(bytes);
    if (found == kept.end() || found->second.empty()) {
      ++stats.allocated;
      return c10::GetCPUAllocator()->allocate(bytes);
    }
    at::DataPtr data = std::move(found->second.back());
    found->second.pop_back();
    stats.kept -= static_cast<int64_t>(bytes);
    ++stats.reused;
    return data;
  }

  void give_back(size_t bytes, at::DataPtr data) {
    std::lock_guard<std::mutex> lock(mutex);
    stats.in_use -= static_cast<int64_t>(bytes);
    if (!open) return;  // `data` is freed on the way out
    kept[bytes].push_back(std::move(data));
    stats.kept += static_cast<int64_t>(bytes);
  }

  void close() {
    std::lock_guard<std::mutex> lock(mutex);
    open = false;
    kept.clear();
    stats.kept = 0;
  }
};

BufferPool::BufferPool() : state_(std::make_shared<State>()) {}

BufferPool::~BufferPool() { state_->close(); }

at::DataPtr BufferPool::allocate(size_t bytes, c10::Device device) {
  if (!device.is_cpu()) return c10::GetAllocator(device.type())->allocate(bytes);
  return state_->lend(bytes);
}

at::Tensor BufferPool::empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  const int64_t numel = c10::multiply_integers(sizes);
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  at::Storage storage(at::Storage::use_byte_size_t(), bytes, allocate(bytes, options.device()),
                      c10::GetAllocator(options.device().type()), /*resizable=*/false);
  return at::empty({0}, options).set_(storage, 0, sizes);
}

BufferPool::Stats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

}  // namespace engine::model::sharding
