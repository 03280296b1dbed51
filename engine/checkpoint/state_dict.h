#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

// PyTorch's state_dict / load_state_dict for LibTorch modules.
namespace engine::checkpoint {

using StateDict = std::map<std::string, at::Tensor>;

// Every parameter and buffer of `module` and its descendants by dotted name,
// detached (they share storage with the module).
StateDict state_dict(const torch::nn::Module& module);

// The form checkpoint files hold a state dict in (Dict<str, Tensor>), and
// back (each tensor moved to `device`).
c10::Dict<std::string, at::Tensor> to_dict(const StateDict& state);
StateDict from_dict(const c10::impl::GenericDict& dict, const at::Device& device = at::kCPU);

// (pattern, replacement) pairs applied in order to every key with
// std::regex_replace; mmengine's revise_keys. The default strips a leading
// "module." (a checkpoint saved from a wrapped model).
using KeyRevisions = std::vector<std::pair<std::string, std::string>>;
const KeyRevisions& default_key_revisions();
StateDict revise_keys(const StateDict& state, const KeyRevisions& revisions);

// Copies `state` into `module`'s parameters and buffers (converted to each
// one's dtype and device). A shape mismatch is always an error. strict:
// keys the module lacks, or module entries the state lacks, are an error
// listing them all; otherwise they are skipped. `source` names the origin
// (a file) in messages. Returns the keys that were not loaded.
std::vector<std::string> load_state_dict(torch::nn::Module& module, const StateDict& state,
                                         bool strict, const std::string& source);

}  // namespace engine::checkpoint
