#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "engine/dist/group.h"
#include "engine/model/wrappers/reducer.h"

namespace engine::model {

// "float@cpu": tensors with equal keys can share one flat buffer.
std::string dtype_device_key(const at::Tensor& tensor);

// Collective: every rank passes its parameters. Throws InvalidArgument on
// every rank, naming the first difference of each rank from rank 0 (name,
// shape or dtype, or a different count), when they are not the same.
void verify_same_parameters(const std::vector<NamedParameter>& params, const dist::GroupPtr& group);

// Collective: overwrites `tensors` on every rank with the values of the
// group's rank `source` (the first by default), in one broadcast per dtype
// and device.
void broadcast_from_rank(const std::vector<at::Tensor>& tensors, const dist::GroupPtr& group,
                         int source = 0);

}  // namespace engine::model
