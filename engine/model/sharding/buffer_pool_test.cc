#include "engine/model/sharding/buffer_pool.h"

#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <thread>
#include <vector>

namespace engine::model::sharding {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
const c10::Device kCpu(c10::kCPU);

TEST(BufferPool, AFreedBufferServesTheNextRequestOfItsSize) {
  BufferPool pool;
  void* first = nullptr;
  {
    at::DataPtr data = pool.allocate(4 * kMiB, kCpu);
    first = data.get();
  }
  EXPECT_EQ(pool.stats().kept, int64_t{4 * kMiB});
  at::DataPtr again = pool.allocate(4 * kMiB, kCpu);
  EXPECT_EQ(again.get(), first);
  const BufferPool::Stats stats = pool.stats();
  EXPECT_EQ(stats.reused, 1);
  EXPECT_EQ(stats.allocated, 1);
  EXPECT_EQ(stats.kept, 0);
  EXPECT_EQ(stats.in_use, int64_t{4 * kMiB});
}

TEST(BufferPool, OnlyARequestOfExactlyAKeptBuffersSizeTakesIt) {
  BufferPool pool;
  { at::DataPtr data = pool.allocate(9 * kMiB, kCpu); }
  at::DataPtr smaller = pool.allocate(9 * kMiB - 1, kCpu);
  at::DataPtr larger = pool.allocate(9 * kMiB + 1, kCpu);
  BufferPool::Stats stats = pool.stats();
  EXPECT_EQ(stats.reused, 0);
  EXPECT_EQ(stats.kept, int64_t{9 * kMiB});
  at::DataPtr same = pool.allocate(9 * kMiB, kCpu);
  stats = pool.stats();
  EXPECT_EQ(stats.reused, 1);
  EXPECT_EQ(stats.kept, 0);
  EXPECT_EQ(stats.in_use, int64_t{27 * kMiB});
}

TEST(BufferPool, ATensorFromThePoolHasItsShapeAndOptionsAndGoesBackWhenItDies) {
  BufferPool pool;
  {
    at::Tensor t = pool.empty({3, kMiB / 4}, at::TensorOptions().dtype(at::kDouble));
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, kMiB / 4}));
    EXPECT_EQ(t.scalar_type(), at::kDouble);
    EXPECT_TRUE(t.is_contiguous());
    t.fill_(2.5);  // the memory is writable end to end
    EXPECT_EQ(t.sum().item<double>(), 2.5 * 3 * (kMiB / 4));
  }
  EXPECT_EQ(pool.stats().kept, int64_t{6 * kMiB});
}

TEST(BufferPool, ABufferFreedOnAnotherThreadOrAfterThePoolIsKeptOrFreed) {
  auto pool = std::make_unique<BufferPool>();
  at::DataPtr data = pool->allocate(2 * kMiB, kCpu);
  std::thread([&] { data.clear(); }).join();
  EXPECT_EQ(pool->stats().kept, int64_t{2 * kMiB});
  at::DataPtr outliving = pool->allocate(2 * kMiB, kCpu);
  pool.reset();
  outliving.clear();  // freed, not kept: there is no pool to keep it
}

// Random requests and frees of a few sizes: the pool counts the bytes in
// use exactly, never lends memory that is still lent, allocates only when
// nothing of the size is kept, and holds for every size at most as many
// buffers as were once lent together.
RC_GTEST_PROP(BufferPool, HoldsPerSizeAtMostItsPeakAndNeverLendsMemoryTwice, ()) {
  BufferPool pool;
  std::map<uintptr_t, std::pair<size_t, at::DataPtr>> lent;  // by address
  std::map<size_t, int> lent_by_size, peak_by_size;
  int64_t lent_bytes = 0;
  const int operations = *rc::gen::inRange(1, 60);
  for (int i = 0; i < operations; ++i) {
    const BufferPool::Stats before = pool.stats();
    if (!lent.empty() && *rc::gen::arbitrary<bool>()) {
      auto it = lent.begin();
      std::advance(it, *rc::gen::inRange<size_t>(0, lent.size()));
      lent_bytes -= static_cast<int64_t>(it->second.first);
      --lent_by_size[it->second.first];
      lent.erase(it);
    } else {
      const size_t bytes = kMiB + *rc::gen::inRange<size_t>(0, 4) * 8;
      at::DataPtr data = pool.allocate(bytes, kCpu);
      const auto address = reinterpret_cast<uintptr_t>(data.get());
      auto next = lent.lower_bound(address);
      RC_ASSERT(next == lent.end() || address + bytes <= next->first);
      if (next != lent.begin()) {
        auto previous = std::prev(next);
        RC_ASSERT(previous->first + previous->second.first <= address);
      }
      const bool any_kept = peak_by_size[bytes] > lent_by_size[bytes];
      RC_ASSERT(pool.stats().allocated == before.allocated + (any_kept ? 0 : 1));
      lent_bytes += static_cast<int64_t>(bytes);
      peak_by_size[bytes] = std::max(peak_by_size[bytes], ++lent_by_size[bytes]);
      lent.emplace(address, std::make_pair(bytes, std::move(data)));
    }
    int64_t bound = 0;
    for (const auto& [bytes, peak] : peak_by_size) bound += static_cast<int64_t>(bytes) * peak;
    const BufferPool::Stats stats = pool.stats();
    RC_ASSERT(stats.in_use == lent_bytes);
    RC_ASSERT(stats.in_use + stats.kept == bound);
  }
}

}  // namespace
}  // namespace engine::model::sharding
