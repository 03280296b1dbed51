#include "engine/strategy/fsdp_strategy.h"
#include "engine/strategy/strategy.h"
#include "engine/strategy/zero_strategy.h"

namespace engine::strategy {
namespace {

using registry::ConfigReader;

EnvOptions env_options(ConfigReader& config) {
  EnvOptions options;
  options.launcher = config.get("launcher", options.launcher);
  options.backend = config.get("backend", options.backend);
  const auto timeout_s = config.get_optional<double>("timeout_s");
  if (timeout_s) {
    if (*timeout_s <= 0) config.fail("key \"timeout_s\" must be positive");
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000));
  }
  options.seed = config.get_optional<int64_t>("seed");
  options.diff_rank_seed = config.get("diff_rank_seed", options.diff_rank_seed);
  options.deterministic = config.get("deterministic", options.deterministic);
  options.seed_process_generator =
      config.get("seed_process_generator", options.seed_process_generator);
  return options;
}

void add_builtin_strategies(StrategyRegistry& registry) {
  registry.add("SingleDeviceStrategy", [](ConfigReader& config) -> std::shared_ptr<BaseStrategy> {
    return std::make_shared<SingleDeviceStrategy>(env_options(config));
  });
  registry.add("DDPStrategy", [](ConfigReader& config) -> std::shared_ptr<BaseStrategy> {
    EnvOptions env = env_options(config);
    DDPStrategyOptions options;
    options.model_wrapper = config.get("model_wrapper", options.model_wrapper);
    options.sync_bn = config.get_optional<std::string>("sync_bn");
    return std::make_shared<DDPStrategy>(std::move(env), std::move(options));
  });
  registry.add("FSDPStrategy", [](ConfigReader& config) -> std::shared_ptr<BaseStrategy> {
    EnvOptions env = env_options(config);
    FSDPStrategyOptions options;
    options.model_wrapper = config.get("model_wrapper", options.model_wrapper);
    options.sync_bn = config.get_optional<std::string>("sync_bn");
    if (const auto type = config.get_optional<std::string>("state_dict_type")) {
      options.state_dict_type = parse_state_dict_type(*type);
    }
    return std::make_shared<FSDPStrategy>(std::move(env), std::move(options));
  });
  registry.add("ZeroStrategy", [](ConfigReader& config) -> std::shared_ptr<BaseStrategy> {
    EnvOptions env = env_options(config);
    ZeroStrategyOptions options;
    options.stage = config.get("stage", options.stage);
    // DeepSpeed configs write it as 5e8: a number, not necessarily an integer.
    options.reduce_bucket_size = static_cast<int64_t>(
        config.get("reduce_bucket_size", static_cast<double>(options.reduce_bucket_size)));
    options.overlap_comm = config.get("overlap_comm", options.overlap_comm);
    // Gradients always travel packed in one flat buffer per bucket, which is
    // what contiguous_gradients asks DeepSpeed for; either value is accepted.
    config.get("contiguous_gradients", true);
    if (const auto type = config.get_optional<std::string>("state_dict_type")) {
      options.state_dict_type = parse_state_dict_type(*type);
    }
    return std::make_shared<ZeroStrategy>(std::move(env), options);
  });
}

}  // namespace

StrategyRegistry& strategies() {
  static StrategyRegistry registry("STRATEGIES", add_builtin_strategies);
  return registry;
}

}  // namespace engine::strategy
