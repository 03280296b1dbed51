#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "engine/dist/reduce_op.h"

namespace engine::dist {

// One call as the wrappers around a backend see it before it starts: the
// forwarding base hands it to the debug mode's checks and to the flight
// recorder, which records it with global ranks for root and peer.
struct Call {
  // "all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter",
  // "reduce_scatter", "all_to_all", "barrier", "send" or "recv" (and
  // "new_group" where a wrapper describes split() the same way). Both forms
  // of all_gather and of reduce_scatter share a kind.
  const char* kind;
  // The tensor whose dtype and shape describe the call: the one reduced or
  // moved, the input of all_gather and gather, the output of scatter and
  // reduce_scatter, the first input of all_to_all; undefined for barrier
  // and for an all_to_all without inputs.
  const at::Tensor* like;
  std::optional<ReduceOp> op;  // reductions only
  int root = -1;               // broadcast, reduce, gather, scatter: a group rank
  int peer = -1;               // send, recv: a group rank
  bool point_to_point() const { return peer >= 0; }
};

}  // namespace engine::dist
