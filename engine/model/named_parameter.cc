#include "engine/model/named_parameter.h"

#include <torch/nn/module.h>

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

}  // namespace engine::model
