#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

#include "engine/model/sharding/shard_layout.h"

// Resharding: the rows of a tensor that was saved in one layout's chunks,
// read into a shard of another layout (any world size).
namespace engine::checkpoint::sharded {

// Chunk k of the saved tensor, as it was saved (its valid rows only).
using PieceOf = std::function<at::Tensor(int chunk)>;

// Fills `target`'s first `count` rows with rows [begin, begin + count) of
// the tensor saved in `saved`'s chunks, and zeroes the rest. CheckpointError
// naming `what` when a chunk holds other rows than its layout says.
void fill_rows(at::Tensor target, int64_t begin, int64_t count,
               const model::sharding::ShardLayout& saved, const PieceOf& piece_of,
               const std::string& what);

}  // namespace engine::checkpoint::sharded
