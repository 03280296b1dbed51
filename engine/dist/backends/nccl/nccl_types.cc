#include "engine/dist/backends/nccl/nccl_types.h"

#include <string>

#include "engine/dist/errors.h"

namespace engine::dist::nccl {

void check(ncclResult_t result, const char* what, int rank) {
  if (result == ncclSuccess) return;
  throw DistError(
      on_rank(rank, std::string("nccl ") + what + " failed: " + ncclGetErrorString(result)));
}

void check(cudaError_t result, const char* what, int rank) {
  if (result == cudaSuccess) return;
  throw DistError(
      on_rank(rank, std::string("cuda ") + what + " failed: " + cudaGetErrorString(result)));
}

ncclDataType_t datatype_of(c10::ScalarType dtype, int rank) {
  switch (dtype) {
    case c10::kFloat:
      return ncclFloat32;
    case c10::kDouble:
      return ncclFloat64;
    case c10::kHalf:
      return ncclFloat16;
    case c10::kBFloat16:
      return ncclBfloat16;
    case c10::kChar:
      return ncclInt8;
    case c10::kByte:
    case c10::kBool:
      return ncclUint8;
    case c10::kInt:
      return ncclInt32;
    case c10::kLong:
      return ncclInt64;
    default:
      throw InvalidArgument(on_rank(rank, std::string("the nccl backend cannot move ") +
                                              c10::toString(dtype) +
                                              " tensors: convert them first"));
  }
}

ncclRedOp_t op_of(c10::ScalarType dtype, ReduceOp op, int rank) {
  const bool is_bool = dtype == c10::kBool;
  switch (op) {
    case ReduceOp::kSum:
      return is_bool ? ncclMax : ncclSum;
    case ReduceOp::kProduct:
      return is_bool ? ncclMin : ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kBand:
      if (is_bool) return ncclMin;
      break;
    case ReduceOp::kBor:
      if (is_bool) return ncclMax;
      break;
    case ReduceOp::kBxor:
      break;
  }
  throw InvalidArgument(on_rank(rank, std::string("nccl has no ") + reduce_op_name(op) + " for " +
                                          c10::toString(dtype) +
                                          " tensors: use sum/min/max, or bool tensors"));
}

}  // namespace engine::dist::nccl
