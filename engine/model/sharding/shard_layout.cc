#include "engine/model/sharding/shard_layout.h"

#include <ATen/core/Tensor.h>

#include <algorithm>

namespace engine::model::sharding {

std::vector<int64_t> ShardLayout::shard_sizes() const {
  std::vector<int64_t> sizes = full_sizes;
  if (sizes.empty()) return {chunk_rows};
  sizes[0] = chunk_rows;
  return sizes;
}

int64_t ShardLayout::valid_rows(int rank) const {
  return std::clamp<int64_t>(rows - rank * chunk_rows, 0, chunk_rows);
}

ShardLayout shard_layout(at::IntArrayRef full_sizes, int shards) {
  ShardLayout layout;
  layout.full_sizes = full_sizes.vec();
  layout.shards = shards;
  layout.rows = full_sizes.empty() ? 1 : full_sizes[0];
  layout.row_numel = 1;
  for (size_t d = 1; d < full_sizes.size(); ++d) layout.row_numel *= full_sizes[d];
  layout.chunk_rows = (layout.rows + shards - 1) / shards;
  return layout;
}

void copy_shard(const at::Tensor& full, const ShardLayout& layout, int rank, at::Tensor shard) {
  shard.zero_();
  const int64_t valid = layout.valid_rows(rank) * layout.row_numel;
  if (valid == 0) return;
  shard.narrow(0, 0, valid).copy_(full.reshape({-1}).narrow(0, rank * layout.shard_numel(), valid));
}

void copy_from_blocks(const at::Tensor& blocks, int64_t offset, const ShardLayout& layout,
                      at::Tensor full) {
  for (int rank = 0; rank < layout.shards; ++rank) {
    const int64_t valid = layout.valid_rows(rank) * layout.row_numel;
    if (valid == 0) continue;
    full.narrow(0, rank * layout.shard_numel(), valid).copy_(blocks[rank].narrow(0, offset, valid));
  }
}

void copy_into_blocks(const at::Tensor& full, int64_t offset, const ShardLayout& layout,
                      at::Tensor blocks) {
  for (int rank = 0; rank < layout.shards; ++rank) {
    const int64_t valid = layout.valid_rows(rank) * layout.row_numel;
    if (valid == 0) continue;
    blocks[rank].narrow(0, offset, valid).copy_(full.narrow(0, rank * layout.shard_numel(), valid));
  }
}

}  // namespace engine::model::sharding
