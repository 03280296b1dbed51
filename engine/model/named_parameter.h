#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace engine::model {

// A parameter and its name in the module tree ("layer1.weight"), as the
// wrappers list them: `tensor` is the module's own parameter, whose data a
// sharding wrapper replaces with set_data.
struct NamedParameter {
  std::string name;
  at::Tensor tensor;
};

}  // namespace engine::model
