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

// A module's type name without namespace or LibTorch's "Impl" suffix, as
// policies name modules by type: "torch::nn::LinearImpl" -> "Linear".
std::string short_type_name(const torch::nn::Module& module);
// Whether `type_names` holds `module`'s type, by its short or its full name.
bool type_listed(const torch::nn::Module& module, const std::vector<std::string>& type_names);

}  // namespace engine::model
