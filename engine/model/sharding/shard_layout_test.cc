#include "engine/model/sharding/shard_layout.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

namespace engine::model::sharding {
namespace {

std::vector<int64_t> random_shape() {
  const auto dims = *rc::gen::inRange<size_t>(0, 4);
  std::vector<int64_t> shape;
  for (size_t d = 0; d < dims; ++d) shape.push_back(*rc::gen::inRange<int64_t>(0, 7));
  return shape;
}

// Cutting a tensor into every rank's shard, stacking the shards as the
// all-gather does, and reassembling gives the tensor back; padding is zero.
RC_GTEST_PROP(ShardLayout, ShardsReassembleToTheFullTensor, ()) {
  const auto shape = random_shape();
  const int shards = *rc::gen::inRange(1, 9);
  const ShardLayout layout = shard_layout(shape, shards);
  const at::Tensor full = at::arange(layout.full_numel(), at::kDouble).add_(1).view(shape);
  RC_ASSERT(layout.chunk_rows * shards >= layout.rows);
  // The smallest chunk that covers every row.
  const bool smallest =
      layout.rows == 0 ? layout.chunk_rows == 0 : (layout.chunk_rows - 1) * shards < layout.rows;
  RC_ASSERT(smallest);
  const int64_t offset = *rc::gen::inRange<int64_t>(0, 3);
  at::Tensor blocks = at::full({shards, offset + layout.shard_numel()}, -1.0, at::kDouble);
  int64_t valid_total = 0;
  for (int r = 0; r < shards; ++r) {
    at::Tensor shard = at::empty({layout.shard_numel()}, at::kDouble);
    copy_shard(full, layout, r, shard);
    const int64_t valid = layout.valid_rows(r) * layout.row_numel;
    valid_total += valid;
    RC_ASSERT(shard.narrow(0, valid, layout.shard_numel() - valid).eq(0).all().item<bool>());
    blocks[r].narrow(0, offset, layout.shard_numel()).copy_(shard);
  }
  RC_ASSERT(valid_total == layout.full_numel());
  at::Tensor back = at::zeros({layout.full_numel()}, at::kDouble);
  copy_from_blocks(blocks, offset, layout, back);
  RC_ASSERT(back.equal(full.reshape({-1})));
  at::Tensor again = at::zeros_like(blocks);
  copy_into_blocks(back, offset, layout, again);
  for (int r = 0; r < shards; ++r) {
    const int64_t valid = layout.valid_rows(r) * layout.row_numel;
    RC_ASSERT(again[r].narrow(0, offset, valid).equal(blocks[r].narrow(0, offset, valid)));
  }
}

TEST(ShardLayout, FewerRowsThanShardsLeavesEmptyChunks) {
  const ShardLayout layout = shard_layout({2, 3}, 4);
  EXPECT_EQ(layout.chunk_rows, 1);
  EXPECT_EQ(layout.valid_rows(0), 1);
  EXPECT_EQ(layout.valid_rows(1), 1);
  EXPECT_EQ(layout.valid_rows(2), 0);
  EXPECT_EQ(layout.valid_rows(3), 0);
  EXPECT_EQ(layout.shard_sizes(), (std::vector<int64_t>{1, 3}));
}

TEST(ShardLayout, AZeroDimParameterIsOneRow) {
  const ShardLayout layout = shard_layout({}, 3);
  EXPECT_EQ(layout.rows, 1);
  EXPECT_EQ(layout.shard_numel(), 1);
  EXPECT_EQ(layout.valid_rows(0), 1);
  EXPECT_EQ(layout.valid_rows(1), 0);
}

}  // namespace
}  // namespace engine::model::sharding
