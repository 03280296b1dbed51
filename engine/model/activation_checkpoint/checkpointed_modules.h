#pragma once

#include <string>
#include <vector>

#include "engine/model/activation_checkpoint/checkpoint.h"

namespace engine::model {

// Which modules of a model run checkpointed: those whose type is in
// `module_types` (short or full names, as WrapPolicy takes them: "Block",
// "torch::nn::LinearImpl") and those at the paths in `module_names`
// ("layers.0", as named_modules() spells them). The root is never one.
struct CheckpointSelection {
  std::vector<std::string> module_types;
  std::vector<std::string> module_names;
  CheckpointOptions options;
};

// While it lives, the modules `selection` picks under `root` run their
// call_unit(module, input, body) calls through checkpoint() (the same
// call sites a sharding wrapper takes its units from: engine/model/unit_call.h).
// A name in module_names that is not a module of `root`, or a selection
// that picks no module, is an InvalidArgument naming the rank. One marking
// per module at a time; `root` must outlive it.
class CheckpointedModules {
 public:
  CheckpointedModules(const torch::nn::Module& root, CheckpointSelection selection);
  ~CheckpointedModules();
  CheckpointedModules(const CheckpointedModules&) = delete;
  CheckpointedModules& operator=(const CheckpointedModules&) = delete;

  // The paths of the modules picked, in registration order.
  const std::vector<std::string>& names() const { return names_; }

 private:
  CheckpointOptions options_;
  std::vector<std::string> names_;
  std::vector<const torch::nn::Module*> modules_;
};

// The options `module` runs checkpointed with, or nullptr when it is not
// picked.
const CheckpointOptions* checkpoint_options(const torch::nn::Module& module);

}  // namespace engine::model
