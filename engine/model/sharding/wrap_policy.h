#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/named_parameter.h"
#include "engine/model/sharding/flat_unit.h"

namespace engine::model::sharding {

// Which modules become sharding units (FSDP1's auto_wrap_policy, and FSDP2's
// fully_shard by code). Units are chosen bottom-up: a module is a unit when
// it is listed in `modules`, when its type is in `module_types`, or when the
// parameters it holds that no unit inside it took number at least
// `min_num_params` (> 0). The wrapped module itself is the root unit and
// takes whatever is left.
//
// What C++ can reach: a unit is gathered lazily only when the model runs it
// through call_unit (engine/model/unit_call.h); a unit the model calls
// directly is gathered with the root until its first call_unit, so a
// policy can never make a forward read a shard.
struct WrapPolicy {
  // Type names, with or without namespace and LibTorch's "Impl" suffix:
  // "Linear", "torch::nn::LinearImpl".
  std::vector<std::string> module_types;
  int64_t min_num_params = 0;
  std::vector<const torch::nn::Module*> modules;
};

struct UnitPlan {
  std::string name;                 // the module's path; "" for the root
  const torch::nn::Module* module;  // the root module for the root unit
  std::vector<NamedParameter> params;
};

// The units of `root` in forward (registration) order, root first, each with
// the parameters no unit inside it took; parameters of `ignored` modules are
// in none of them, and neither are units left without parameters (the root
// unit is always there).
std::vector<UnitPlan> plan_units(torch::nn::Module& root, const WrapPolicy& policy,
                                 const std::vector<const torch::nn::Module*>& ignored);

}  // namespace engine::model::sharding
