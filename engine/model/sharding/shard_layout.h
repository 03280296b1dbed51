#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace engine::model::sharding {

// FSDP2's per-parameter layout: a parameter is cut along dim 0 into `shards`
// chunks of chunk_rows rows each (the last ones padded with zeros), and
// shard rank r owns chunk r. A parameter with fewer rows than shards leaves
// some ranks only padding (chunk_rows may even be 0 for an empty one); a
// 0-dim parameter counts as one row.
struct ShardLayout {
  std::vector<int64_t> full_sizes;
  int64_t rows = 0;
  int64_t row_numel = 0;
  int64_t chunk_rows = 0;
  int shards = 1;

  int64_t full_numel() const { return rows * row_numel; }
  int64_t shard_numel() const { return chunk_rows * row_numel; }
  // [chunk_rows, full_sizes[1:]...]: the shape a rank's shard has.
  std::vector<int64_t> shard_sizes() const;
  // How many of shard rank `rank`'s rows hold data (the rest is padding).
  int64_t valid_rows(int rank) const;
};

ShardLayout shard_layout(at::IntArrayRef full_sizes, int shards);

// A parameter as one rank holds it at rest: chunk `chunk` of `layout` in
// `data` (layout.shard_sizes(), padding zero). Rank k of a shard group holds
// chunk k; a replicated parameter is one chunk that every rank holds.
struct LocalShard {
  std::string name;
  ShardLayout layout;
  int chunk = 0;
  at::Tensor data;
};

// Writes shard rank `rank`'s padded chunk of `full` into `shard`
// (shard_numel contiguous elements).
void copy_shard(const at::Tensor& full, const ShardLayout& layout, int rank, at::Tensor shard);

// Every rank's chunk of a parameter from the gathered blocks: `blocks` is
// [shards, block elements], this parameter's chunk starting at `offset` in
// every block; `full` (contiguous, full_numel elements) receives them.
void copy_from_blocks(const at::Tensor& blocks, int64_t offset, const ShardLayout& layout,
                      at::Tensor full);

// The reverse, for gradients: `full` (contiguous, full_numel elements) is
// cut into the ranks' chunks, written at `offset` of every block; padding
// is left as it was.
void copy_into_blocks(const at::Tensor& full, int64_t offset, const ShardLayout& layout,
                      at::Tensor blocks);

}  // namespace engine::model::sharding
