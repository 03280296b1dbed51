#pragma once

#include <ATen/core/ivalue.h>

#include <optional>
#include <vector>

#include "engine/dist/group.h"

// Object collectives, after mmengine.dist. Objects are c10::IValue (None,
// bools, ints, doubles, strings, tensors, lists, dicts, tuples), serialized
// with LibTorch's pickler (the torch.save format) and moved as uint8 tensors.
// Not initialised or a group of size 1: identities.
//
// Every rank first learns every rank's length. A length below zero or over
// max_object_bytes() is MalformedInput on every rank that would read it,
// naming the rank that declared it, before any buffer is sized by it.
namespace engine::dist {

// The most bytes one rank's pickled object may take:
// DIST_ENGINE_MAX_OBJECT_BYTES if set (a positive integer; anything else is
// InvalidArgument), else 2^32 (4 GiB). Every rank must use the same.
int64_t max_object_bytes();

// Every rank's object, in group-rank order.
std::vector<c10::IValue> all_gather_object(const c10::IValue& data,
                                           const GroupPtr& group = nullptr);

// On `dst` (a global rank), every rank's object; elsewhere std::nullopt
// (mmengine returns None there).
std::optional<std::vector<c10::IValue>> gather_object(const c10::IValue& data, int dst = 0,
                                                      const GroupPtr& group = nullptr);

// Replaces `data` on every rank with `src`'s list (the lists may differ in
// length before the call).
void broadcast_object_list(std::vector<c10::IValue>& data, int src = 0,
                           const GroupPtr& group = nullptr);

}  // namespace engine::dist
