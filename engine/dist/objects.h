#pragma once

#include <ATen/core/ivalue.h>

#include <optional>
#include <vector>

#include "engine/dist/group.h"

// Object collectives, after mmengine.dist. Objects are c10::IValue (None,
// bools, ints, doubles, strings, tensors, lists, dicts, tuples), serialized
// with LibTorch's pickler (the torch.save format) and moved as uint8 tensors.
// Not initialised or a group of size 1: identities.
namespace engine::dist {

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
