#include "engine/dist/backends/mpi/mpi_types.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "engine/dist/errors.h"
#include "engine/dist/reduce_kernel.h"

namespace engine::dist::mpi {
namespace {

[[noreturn]] void unsupported(c10::ScalarType dtype, const std::string& what, int rank) {
  throw InvalidArgument(on_rank(rank, std::string("the mpi backend cannot ") + what + " " +
                                          c10::toString(dtype) + " tensors: convert them first"));
}

// A user-defined MPI operation reducing 16-bit floats with torch's rounding.
template <c10::ScalarType kDtype, ReduceOp kOp>
void reduce_16bit(void* in, void* inout, int* count, MPI_Datatype*) {
  reduce_into(inout, in, *count, kDtype, kOp);
}

template <c10::ScalarType kDtype>
MPI_Op make_16bit_op(ReduceOp op) {
  MPI_User_function* fn = nullptr;
  switch (op) {
    case ReduceOp::kSum:
      fn = reduce_16bit<kDtype, ReduceOp::kSum>;
      break;
    case ReduceOp::kProduct:
      fn = reduce_16bit<kDtype, ReduceOp::kProduct>;
      break;
    case ReduceOp::kMin:
      fn = reduce_16bit<kDtype, ReduceOp::kMin>;
      break;
    case ReduceOp::kMax:
      fn = reduce_16bit<kDtype, ReduceOp::kMax>;
      break;
    default:
      return MPI_OP_NULL;
  }
  MPI_Op created;
  MPI_Op_create(fn, /*commute=*/1, &created);
  return created;
}

MPI_Op bool_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMax:
    case ReduceOp::kBor:
      return MPI_LOR;
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kBand:
      return MPI_LAND;
    case ReduceOp::kBxor:
      return MPI_LXOR;
  }
  return MPI_OP_NULL;
}

MPI_Op number_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kProduct:
      return MPI_PROD;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kBand:
      return MPI_BAND;
    case ReduceOp::kBor:
      return MPI_BOR;
    case ReduceOp::kBxor:
      return MPI_BXOR;
  }
  return MPI_OP_NULL;
}

}  // namespace

MPI_Datatype datatype_of(c10::ScalarType dtype, int rank) {
  switch (dtype) {
    case c10::kFloat:
      return MPI_FLOAT;
    case c10::kDouble:
      return MPI_DOUBLE;
    case c10::kChar:
      return MPI_INT8_T;
    case c10::kShort:
      return MPI_INT16_T;
    case c10::kInt:
      return MPI_INT32_T;
    case c10::kLong:
      return MPI_INT64_T;
    case c10::kByte:
      return MPI_UINT8_T;
    case c10::kBool:
      return MPI_C_BOOL;
    case c10::kHalf:
    case c10::kBFloat16:
      return MPI_UINT16_T;
    default:
      unsupported(dtype, "move", rank);
  }
}

MPI_Op op_of(c10::ScalarType dtype, ReduceOp op, int rank) {
  if (!can_reduce(dtype, op))
    unsupported(dtype, std::string("reduce with ") + reduce_op_name(op), rank);
  if (dtype == c10::kBool) return bool_op(op);
  if (dtype != c10::kHalf && dtype != c10::kBFloat16) return number_op(op);
  // Created once per (dtype, op), after MPI_Init, and kept until exit.
  static std::mutex mutex;
  static std::map<std::pair<c10::ScalarType, ReduceOp>, MPI_Op> created;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = created[{dtype, op}];
  if (slot == MPI_Op{}) {
    slot = dtype == c10::kHalf ? make_16bit_op<c10::kHalf>(op) : make_16bit_op<c10::kBFloat16>(op);
  }
  return slot;
}

void check(int code, const char* what, int rank) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw DistError(
      on_rank(rank, std::string("mpi ") + what + " failed: " + std::string(text, length)));
}

}  // namespace engine::dist::mpi
