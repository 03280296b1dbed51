#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/dist/reduce_op.h"

namespace engine::dist {

// One call as the wrappers around a backend see it before it starts: the
// forwarding base hands it to the debug mode's checks and to the flight
// recorder, which records it with global ranks for root and peer.
struct Call {
  // The Backend method's name (backend.h's ENGINE_DIST_BACKEND_CALLS), or
  // "new_group" where a wrapper describes split() the same way. Both forms
  // of all_gather and of reduce_scatter share a kind.
  const char* kind;
  // The tensor whose dtype and shape describe the call: the one reduced or
  // moved, the input of all_gather and gather, the output of scatter and
  // reduce_scatter, the first input of all_to_all; undefined for barrier
  // and for an all_to_all without inputs (no_tensor()).
  const at::Tensor* like;
  std::optional<ReduceOp> op;  // reductions only
  int root = -1;               // broadcast, reduce, gather, scatter: a group rank
  int peer = -1;               // send, recv: a group rank
  bool point_to_point() const { return peer >= 0; }
};

// An undefined tensor, for a Call that moves none.
const at::Tensor& no_tensor();

// What the ranks of a group must agree on for one call, held by value: the
// simulator compares every rank's before any data moves, the debug mode
// all-gathers it.
struct CallSignature {
  const char* kind = "";  // as Call::kind (a literal)
  uint64_t seq = 0;       // the call's number among its group's calls of its class
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // Undefined: no tensor
  std::vector<int64_t> shape;
  std::optional<ReduceOp> op;
  int root = -1;
  int peer = -1;           // send, recv: the other side
  std::vector<int> ranks;  // new_group: the new group's members

  // `call`'s signature as the call numbered `seq`.
  static CallSignature of(const Call& call, uint64_t seq);
  // "all_reduce #5 (sum, Float[4, 2])".
  std::string describe() const;
  // Everything but the peer, which only the pair's two ranks know.
  bool same_call(const CallSignature& other) const;
  // The bytes of one tensor of the call's dtype and shape.
  int64_t payload_bytes() const;
};

}  // namespace engine::dist
