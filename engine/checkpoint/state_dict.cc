#include "engine/checkpoint/state_dict.h"

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <regex>
#include <set>

#include "engine/checkpoint/file.h"

namespace engine::checkpoint {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

c10::Dict<std::string, at::Tensor> to_dict(const StateDict& state) {
  c10::Dict<std::string, at::Tensor> out;
  for (const auto& item : state) out.insert(item.first, item.second);
  return out;
}

StateDict from_dict(const c10::impl::GenericDict& dict, const at::Device& device) {
  StateDict out;
  for (const auto& item : dict) out[item.key().toStringRef()] = item.value().toTensor().to(device);
  return out;
}

StateDict state_dict(const torch::nn::Module& module) {
  StateDict state;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    state[item.key()] = item.value().detach();
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    state[item.key()] = item.value().detach();
  }
  return state;
}

const KeyRevisions& default_key_revisions() {
  static const KeyRevisions revisions = {{"^module\\.", ""}};
  return revisions;
}

StateDict revise_keys(const StateDict& state, const KeyRevisions& revisions) {
  std::vector<std::pair<std::regex, std::string>> compiled;
  for (const auto& revision : revisions) compiled.emplace_back(revision.first, revision.second);
  StateDict revised;
  for (const auto& entry : state) {
    std::string key = entry.first;
    for (const auto& revision : compiled)
      key = std::regex_replace(key, revision.first, revision.second);
    revised[key] = entry.second;
  }
  return revised;
}

std::vector<std::string> load_state_dict(torch::nn::Module& module, const StateDict& state,
                                         bool strict, const std::string& source) {
  StateDict targets = state_dict(module);
  std::vector<std::string> missing, unexpected, shape_errors;
  for (const auto& target : targets) {
    auto it = state.find(target.first);
    if (it == state.end()) {
      missing.push_back(target.first);
    } else if (it->second.sizes() != target.second.sizes()) {
      shape_errors.push_back(target.first + " is " + c10::str(it->second.sizes()) +
                             " in the checkpoint, " + c10::str(target.second.sizes()) +
                             " in the model");
    }
  }
  for (const auto& entry : state) {
    if (!targets.count(entry.first)) unexpected.push_back(entry.first);
  }
  std::string problems;
  if (!shape_errors.empty()) problems += " shape mismatch: " + join(shape_errors) + ";";
  if (strict && !missing.empty()) problems += " missing keys: " + join(missing) + ";";
  if (strict && !unexpected.empty()) problems += " unexpected keys: " + join(unexpected) + ";";
  if (!problems.empty()) {
    throw CheckpointError("loading " + source + " into the model:" + problems +
                          " load with strict=false to skip missing or unexpected keys, or "
                          "revise the keys (for example strip a \"module.\" prefix)");
  }
  torch::NoGradGuard no_grad;
  for (auto& target : targets) {
    auto it = state.find(target.first);
    if (it != state.end()) target.second.copy_(it->second);
  }
  missing.insert(missing.end(), unexpected.begin(), unexpected.end());
  return missing;
}

}  // namespace engine::checkpoint
