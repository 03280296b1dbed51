#pragma once

#include <c10/core/ScalarType.h>
#include <mpi.h>

#include "engine/dist/reduce_op.h"

namespace engine::dist::mpi {

// The MPI datatype that moves `dtype` (half and bfloat16 travel as 16-bit
// words). Throws InvalidArgument for dtypes MPI cannot carry.
MPI_Datatype datatype_of(c10::ScalarType dtype, int rank);

// The MPI operation that reduces `dtype` with `op`: predefined where MPI has
// one (bool: logical ops), a user-defined one for half and bfloat16. Throws
// InvalidArgument for combinations no operation covers.
MPI_Op op_of(c10::ScalarType dtype, ReduceOp op, int rank);

// Throws DistError naming `what` when `code` is not MPI_SUCCESS.
void check(int code, const char* what, int rank);

}  // namespace engine::dist::mpi
