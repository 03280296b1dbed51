#include "engine/model/named_parameter.h"

#include <torch/nn/module.h>

#include <algorithm>
#include <unordered_set>

namespace engine::model {

std::vector<NamedParameter> unique_named_parameters(const torch::nn::Module& module, bool recurse) {
  std::vector<NamedParameter> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : module.named_parameters(recurse)) {
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) {
      out.push_back({item.key(), item.value()});
    }
  }
  return out;
}

std::vector<at::Tensor> unique_parameters(const torch::nn::Module& module, bool recurse) {
  std::vector<at::Tensor> out;
  for (auto& param : unique_named_parameters(module, recurse))
    out.push_back(std::move(param.tensor));
  return out;
}

std::string short_type_name(const torch::nn::Module& module) {
  std::string name = module.name();
  const auto colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  const std::string suffix = "Impl";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    name.resize(name.size() - suffix.size());
  }
  return name;
}

bool type_listed(const torch::nn::Module& module, const std::vector<std::string>& type_names) {
  const std::string type = short_type_name(module);
  return std::any_of(type_names.begin(), type_names.end(), [&](const std::string& name) {
    return name == type || name == module.name();
  });
}

}  // namespace engine::model
