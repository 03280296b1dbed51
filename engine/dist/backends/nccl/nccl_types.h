#pragma once

#include <c10/core/ScalarType.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "engine/dist/reduce_op.h"

namespace engine::dist::nccl {

// The NCCL datatype that moves `dtype` (bool as bytes). Throws
// InvalidArgument, naming `rank`, for dtypes NCCL cannot carry.
ncclDataType_t datatype_of(c10::ScalarType dtype, int rank);

// The NCCL operation that reduces `dtype` with `op`. NCCL has no bitwise
// reductions: band/bor/bxor work on bool (as min/max); InvalidArgument
// otherwise, naming `rank`.
ncclRedOp_t op_of(c10::ScalarType dtype, ReduceOp op, int rank);

// Throw DistError naming `what` and `rank` unless `result` is success.
void check(ncclResult_t result, const char* what, int rank);
void check(cudaError_t result, const char* what, int rank);

}  // namespace engine::dist::nccl
