#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

#include "engine/dist/reduce_op.h"

namespace engine::dist {

// Elementwise reductions on raw buffers, for backends that reduce themselves
// (the simulator) or need a user-defined reduction (MPI on half, bfloat16).

// True when reduce_into handles `dtype` with `op`.
bool can_reduce(c10::ScalarType dtype, ReduceOp op);

// acc[i] = acc[i] (op) src[i] for i < count, elementwise in `dtype`, with
// torch's semantics (bool sum is or, product is and; floating min/max
// propagate NaN; half and bfloat16 round after each step).
void reduce_into(void* acc, const void* src, int64_t count, c10::ScalarType dtype, ReduceOp op);

// out[i] = left[i] (op) right[i], as reduce_into with acc = left, in one pass;
// `out` must not overlap either input.
void reduce_to(void* out, const void* left, const void* right, int64_t count, c10::ScalarType dtype,
               ReduceOp op);

// The "mean" step after a sum over `n` ranks, in place: division, truncating
// for integer tensors (as mmengine's all_reduce on them).
void divide_for_mean(at::Tensor& sum, int n);

}  // namespace engine::dist
