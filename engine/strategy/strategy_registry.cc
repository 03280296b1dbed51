#include <set>
#include <string>

#include "engine/model/wrappers/zero_data_parallel.h"
#include "engine/strategy/fsdp_strategy.h"
#include "engine/strategy/strategy.h"
#include "engine/strategy/zero_strategy.h"

namespace engine::strategy {
namespace {

using registry::ConfigReader;

// mmengine's FSDPStrategy state_dict_cfg: "local" or "full", or
// {"state_dict_type": ..., "state_dict_config": {...},
// "optim_state_dict_config": {...}}. The configs may name PyTorch's
// Full/Local/Sharded(Optim)StateDictConfig with offload_to_cpu and
// rank0_only: the engine always writes a full checkpoint from rank 0's CPU
// copies, so a full one with rank0_only false is refused.
StateDictType state_dict_cfg(const registry::Json& value, const ConfigReader& parent) {
  const std::string section = parent.section() + ".state_dict_cfg";
  if (value.is_string()) return parse_state_dict_type(value.get<std::string>());
  if (!value.is_object()) parent.fail("key \"state_dict_cfg\" must be a string or an object");
  ConfigReader reader(value, section);
  const StateDictType type =
      parse_state_dict_type(reader.get<std::string>("state_dict_type", "LOCAL_STATE_DICT"));
  for (const std::string key : {"state_dict_config", "optim_state_dict_config"}) {
    const auto inner = reader.object(key);
    if (!inner) continue;
    ConfigReader config(*inner, section + "." + key);
    const auto name = config.require<std::string>("type");
    static const std::set<std::string> known = {
        "FullStateDictConfig",       "FullOptimStateDictConfig", "LocalStateDictConfig",
        "LocalOptimStateDictConfig", "ShardedStateDictConfig",   "ShardedOptimStateDictConfig"};
    if (!known.count(name)) config.fail("has the unknown type \"" + name + "\"");
    config.get("offload_to_cpu", true);
    if (!config.get("rank0_only", true) && type == StateDictType::kFull) {
      config.fail("rank0_only false: the engine writes a full checkpoint from rank 0 only");
    }
    config.finish();
  }
  reader.finish();
  return type;
}

EnvOptions env_options(ConfigReader& config) {
  EnvOptions options;
  options.launcher = config.get("launcher", options.launcher);
  options.backend = config.get("backend", options.backend);
  const auto timeout_s = config.get_optional<double>("timeout_s");
  if (timeout_s) {
    // The bound keeps the conversion to milliseconds inside int64_t.
    constexpr double kMaxTimeoutS = 365.0 * 24 * 3600;
    if (!(*timeout_s > 0 && *timeout_s <= kMaxTimeoutS)) {
      config.fail("key \"timeout_s\" must be positive and at most a year (" +
                  std::to_string(static_cast<int64_t>(kMaxTimeoutS)) + " s)");
    }
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000));
  }
  options.seed = config.get_optional<int64_t>("seed");
  options.diff_rank_seed = config.get("diff_rank_seed", options.diff_rank_seed);
  options.deterministic = config.get("deterministic", options.deterministic);
  options.seed_process_generator =
      config.get("seed_process_generator", options.seed_process_generator);
  return options;
}

// activation_checkpointing: ["layers.0", ...], the module paths mmengine's
// runner takes, or {"check_fn": {"type": "ModuleWrapPolicy",
// "module_classes": [...]}, "preserve_rng_state": bool}: FSDPStrategy's key,
// with check_fn in auto_wrap_policy's shape (as mmengine asks of it).
std::shared_ptr<BaseStrategy> with_activation_checkpointing(
    ConfigReader& config, std::shared_ptr<BaseStrategy> strategy) {
  const auto value = config.value("activation_checkpointing");
  if (!value || value->is_null()) return strategy;
  const std::string section = config.section() + ".activation_checkpointing";
  model::CheckpointSelection selection;
  if (value->is_array()) {
    selection.module_names = config.require<std::vector<std::string>>("activation_checkpointing");
  } else {
    if (!value->is_object())
      config.fail("key \"activation_checkpointing\" must be a list or an object");
    ConfigReader reader(*value, section);
    const auto policy = reader.object("check_fn");
    if (!policy) reader.fail("lacks the required key \"check_fn\"");
    ConfigReader check_fn(*policy, section + ".check_fn");
    const auto type = check_fn.require<std::string>("type");
    if (type != "ModuleWrapPolicy") {
      check_fn.fail("has the unknown type \"" + type + "\"; known types: ModuleWrapPolicy");
    }
    selection.module_types = check_fn.require<std::vector<std::string>>("module_classes");
    check_fn.finish();
    selection.options.preserve_rng_state =
        reader.get("preserve_rng_state", selection.options.preserve_rng_state);
    reader.finish();
  }
  strategy->set_activation_checkpointing(std::move(selection));
  return strategy;
}

void add_builtin_strategies(StrategyRegistry& registry) {
  registry.add("SingleDeviceStrategy", [](ConfigReader& config) -> std::shared_ptr<BaseStrategy> {
    return with_activation_checkpointing(
        config, std::make_shared<SingleDeviceStrategy>(env_options(config)));
  });
  registry.add("DDPStrategy", [](ConfigReader& config) -> std::shared_ptr<BaseStrategy> {
    EnvOptions env = env_options(config);
    DDPStrategyOptions options;
    options.model_wrapper = config.get("model_wrapper", options.model_wrapper);
    options.sync_bn = config.get_optional<std::string>("sync_bn");
    return with_activation_checkpointing(
        config, std::make_shared<DDPStrategy>(std::move(env), std::move(options)));
  });
  registry.add("FSDPStrategy", [](ConfigReader& config) -> std::shared_ptr<BaseStrategy> {
    EnvOptions env = env_options(config);
    FSDPStrategyOptions options;
    options.model_wrapper = config.get("model_wrapper", options.model_wrapper);
    options.sync_bn = config.get_optional<std::string>("sync_bn");
    options.skip_init_weights = config.get("skip_init_weights", options.skip_init_weights);
    if (options.skip_init_weights && options.model_wrapper.is_object() &&
        options.model_wrapper.value("type", "MMFullyShardedDataParallel") !=
            "MMFullyShardedDataParallel") {
      config.fail("key \"skip_init_weights\" needs the MMFullyShardedDataParallel model_wrapper");
    }
    if (const auto type = config.get_optional<std::string>("state_dict_type")) {
      options.state_dict_type = parse_state_dict_type(*type);
    }
    if (const auto cfg = config.value("state_dict_cfg")) {
      if (config.has("state_dict_type")) {
        config.fail("takes state_dict_type or mmengine's state_dict_cfg, not both");
      }
      options.state_dict_type = state_dict_cfg(*cfg, config);
    }
    return with_activation_checkpointing(
        config, std::make_shared<FSDPStrategy>(std::move(env), std::move(options)));
  });
  registry.add("ZeroStrategy", [](ConfigReader& config) -> std::shared_ptr<BaseStrategy> {
    EnvOptions env = env_options(config);
    ZeroStrategyOptions options;
    options.stage = config.get("stage", options.stage);
    // DeepSpeed configs write it as 5e8: a number, not necessarily an integer.
    options.reduce_bucket_size = config.get_whole("reduce_bucket_size", options.reduce_bucket_size,
                                                  1, model::kMaxReduceBucketSize);
    options.overlap_comm = config.get("overlap_comm", options.overlap_comm);
    options.sync_bn = config.get_optional<std::string>("sync_bn");
    // Gradients always travel packed in one flat buffer per bucket, which is
    // what contiguous_gradients asks DeepSpeed for; either value is accepted.
    config.get("contiguous_gradients", true);
    if (const auto type = config.get_optional<std::string>("state_dict_type")) {
      options.state_dict_type = parse_state_dict_type(*type);
    }
    return with_activation_checkpointing(config,
                                         std::make_shared<ZeroStrategy>(std::move(env), options));
  });
}

}  // namespace

StrategyRegistry& strategies() {
  static StrategyRegistry registry("STRATEGIES", add_builtin_strategies);
  return registry;
}

}  // namespace engine::strategy
