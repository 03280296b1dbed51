#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace engine::model {

// A parameter and its name in the module tree ("layer1.weight"), as the
// wrappers list them: `tensor` is the module's own parameter, whose data a
// sharding wrapper replaces with set_data.
struct NamedParameter {
  std::string name;
  at::Tensor tensor;
};

// `module`'s parameters, each tensor once, under the first name that
// reaches it, as PyTorch's named_parameters() lists them. LibTorch lists a
// parameter registered in two modules (tied weights) twice, once under each
// name: an optimizer given both would step it twice, a reducer reduce it
// twice, a sharder hold two copies that drift apart.
std::vector<NamedParameter> unique_named_parameters(const torch::nn::Module& module,
                                                    bool recurse = true);
std::vector<at::Tensor> unique_parameters(const torch::nn::Module& module, bool recurse = true);

}  // namespace engine::model
