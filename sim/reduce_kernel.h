#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

#include "engine/dist/reduce_op.h"

namespace sim {

// True when the simulator can reduce `dtype` with `op`.
bool can_reduce(c10::ScalarType dtype, engine::dist::ReduceOp op);

// acc[i] = acc[i] (op) src[i] for i < count, elementwise in `dtype`, with
// torch's semantics (bool sum is or, product is and; floating min/max
// propagate NaN; half and bfloat16 round after each step).
void reduce_into(void* acc, const void* src, int64_t count, c10::ScalarType dtype,
                 engine::dist::ReduceOp op);

}  // namespace sim
