#include "engine/model/activation_checkpoint/checkpointed_modules.h"

#include <torch/nn/module.h>

#include <algorithm>
#include <set>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/model/named_parameter.h"
#include "engine/registry/attachments.h"

namespace engine::model {
namespace {

registry::Attachments<torch::nn::Module, const CheckpointOptions>& marks() {
  static registry::Attachments<torch::nn::Module, const CheckpointOptions> instance;
  return instance;
}

[[noreturn]] void refuse(const std::string& what) {
  throw dist::InvalidArgument(dist::on_rank(dist::get_rank(), "activation checkpointing: " + what));
}

}  // namespace

CheckpointedModules::CheckpointedModules(const torch::nn::Module& root,
                                         CheckpointSelection selection)
    : options_(std::move(selection.options)) {
  std::set<std::string> unseen(selection.module_names.begin(), selection.module_names.end());
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    const bool by_name = unseen.erase(item.key()) > 0;
    if (!by_name && !type_listed(*item.value(), selection.module_types)) continue;
    names_.push_back(item.key());
    modules_.push_back(item.value().get());
  }
  if (!unseen.empty()) {
    refuse("the model has no module named \"" + *unseen.begin() +
           "\" (give paths as named_modules() spells them, such as \"layers.0\")");
  }
  if (modules_.empty()) {
    refuse(
        "no module of the model has a type in module_types; name them as WrapPolicy does "
        "(\"Linear\" or \"torch::nn::LinearImpl\")");
  }
  for (const auto* module : modules_) marks().attach(module, &options_);
}

CheckpointedModules::~CheckpointedModules() {
  for (const auto* module : modules_) marks().detach(module);
}

const CheckpointOptions* checkpoint_options(const torch::nn::Module& module) {
  return marks().find(&module);
}

}  // namespace engine::model
