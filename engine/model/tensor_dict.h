#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace engine::model {

// What flows between a data loader, a model and a trainer: named tensors
// (mmengine passes dicts; a C++ trainer gets the same shape with types).
using TensorDict = std::map<std::string, at::Tensor>;

}  // namespace engine::model
