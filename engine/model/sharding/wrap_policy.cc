#include "engine/model/sharding/wrap_policy.h"

#include <algorithm>
#include <unordered_set>

#include "engine/model/named_parameter.h"

namespace engine::model::sharding {
namespace {

using Taken = std::unordered_set<const c10::TensorImpl*>;

bool listed(const std::vector<const torch::nn::Module*>& modules, const torch::nn::Module* m) {
  return std::find(modules.begin(), modules.end(), m) != modules.end();
}

std::vector<NamedParameter> untaken(const torch::nn::Module& module, const std::string& prefix,
                                    const Taken& taken) {
  std::vector<NamedParameter> params;
  for (const auto& param : unique_named_parameters(module)) {
    if (taken.count(param.tensor.unsafeGetTensorImpl()) == 0) {
      params.push_back({prefix.empty() ? param.name : prefix + "." + param.name, param.tensor});
    }
  }
  return params;
}

bool chosen(const WrapPolicy& policy, const torch::nn::Module& module,
            const std::vector<NamedParameter>& params) {
  if (listed(policy.modules, &module)) return true;
  if (type_listed(module, policy.module_types)) return true;
  if (policy.min_num_params <= 0) return false;
  int64_t count = 0;
  for (const auto& param : params) count += param.tensor.numel();
  return count >= policy.min_num_params;
}

// The modules that register each parameter themselves (more than one for
// a tied parameter).
using Registrants =
    std::unordered_map<const c10::TensorImpl*, std::vector<const torch::nn::Module*>>;

Registrants registrants_of(const torch::nn::Module& root) {
  Registrants out;
  auto add = [&](const torch::nn::Module& module) {
    for (const auto& param : module.parameters(/*recurse=*/false))
      out[param.unsafeGetTensorImpl()].push_back(&module);
  };
  add(root);
  for (const auto& module : root.modules(/*include_self=*/false)) add(*module);
  return out;
}

// A tied parameter belongs to the innermost unit whose module holds every
// module that uses it: a unit below would be resting (sharded) while a
// module outside it computes with the parameter.
void keep_tied_within(const torch::nn::Module& module, const Registrants& registrants,
                      std::vector<NamedParameter>& params) {
  std::unordered_set<const torch::nn::Module*> subtree = {&module};
  for (const auto& inner : module.modules(/*include_self=*/false)) subtree.insert(inner.get());
  std::erase_if(params, [&](const NamedParameter& param) {
    const auto& users = registrants.at(param.tensor.unsafeGetTensorImpl());
    return !std::all_of(users.begin(), users.end(),
                        [&](const torch::nn::Module* user) { return subtree.count(user) > 0; });
  });
}

}  // namespace

std::vector<UnitPlan> plan_units(torch::nn::Module& root, const WrapPolicy& policy,
                                 const std::vector<const torch::nn::Module*>& ignored) {
  const Registrants registrants = registrants_of(root);
  Taken taken;
  for (const auto* module : ignored) {
    for (const auto& param : module->parameters()) taken.insert(param.unsafeGetTensorImpl());
  }
  const auto modules = root.named_modules("", /*include_self=*/false);
  // Inner modules before the ones that hold them: reverse registration order.
  std::vector<UnitPlan> units;
  for (size_t k = modules.size(); k-- > 0;) {
    const auto& item = modules[k];
    if (listed(ignored, item.value().get())) continue;
    std::vector<NamedParameter> params = untaken(*item.value(), item.key(), taken);
    keep_tied_within(*item.value(), registrants, params);
    if (params.empty() || !chosen(policy, *item.value(), params)) continue;
    for (const auto& param : params) taken.insert(param.tensor.unsafeGetTensorImpl());
    units.push_back({item.key(), item.value().get(), std::move(params)});
  }
  std::reverse(units.begin(), units.end());
  units.insert(units.begin(), UnitPlan{"", &root, untaken(root, "", taken)});
  return units;
}

}  // namespace engine::model::sharding
