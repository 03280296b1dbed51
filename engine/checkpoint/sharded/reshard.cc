#include "engine/checkpoint/sharded/reshard.h"

#include <ATen/ops/cat.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <vector>

#include "engine/checkpoint/sharded/directory.h"

namespace engine::checkpoint::sharded {
namespace {

using model::sharding::ShardLayout;

// Rows [begin, begin + count) of a tensor saved in `saved`'s chunks.
at::Tensor saved_rows(const ShardLayout& saved, int64_t begin, int64_t count,
                      const PieceOf& piece_of, const std::string& what) {
  std::vector<at::Tensor> parts;
  const int64_t chunk_rows = saved.chunk_rows;
  for (int64_t k = begin / chunk_rows; k * chunk_rows < begin + count; ++k) {
    const at::Tensor piece = piece_of(static_cast<int>(k));
    if (piece.dim() == 0 || piece.size(0) != saved.valid_rows(static_cast<int>(k))) {
      throw error_here(what + ": chunk " + std::to_string(k) + " has " +
                       std::to_string(piece.dim() ? piece.size(0) : 0) + " rows, its layout " +
                       std::to_string(saved.valid_rows(static_cast<int>(k))));
    }
    const int64_t low = std::max(begin, k * chunk_rows);
    const int64_t high = std::min(begin + count, (k + 1) * chunk_rows);
    parts.push_back(piece.narrow(0, low - k * chunk_rows, high - low));
  }
  return at::cat(parts);
}

}  // namespace

void fill_rows(at::Tensor target, int64_t begin, int64_t count, const ShardLayout& saved,
               const PieceOf& piece_of, const std::string& what) {
  c10::NoGradGuard no_grad;
  target.zero_();
  if (count > 0) target.narrow(0, 0, count).copy_(saved_rows(saved, begin, count, piece_of, what));
}

}  // namespace engine::checkpoint::sharded
