#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace engine::dist {

// The reductions a backend performs. "mean" is not here: the dist layer does
// it as a sum followed by a division, like mmengine.
enum class ReduceOp { kSum, kProduct, kMin, kMax, kBand, kBor, kBxor };

// mmengine's reduce-op names, case-insensitive: sum, mean, product, min, max,
// band, bor, bxor.
struct ReduceSpec {
  ReduceOp op;
  bool mean;  // divide by the group size afterwards
};

// Parses `name` for a tensor of `dtype`, given to `call`. Throws
// InvalidArgument naming `rank` and `call` for an unknown name, a bitwise op
// on a floating dtype, mean on bool, or a dtype that no backend reduces
// (complex ones: every backend reduces what can_reduce allows).
ReduceSpec parse_reduce_op(const std::string& name, c10::ScalarType dtype, int rank,
                           const char* call);

const char* reduce_op_name(ReduceOp op);
// band, bor and bxor: defined on integral and bool tensors only.
bool is_bitwise(ReduceOp op);

}  // namespace engine::dist
