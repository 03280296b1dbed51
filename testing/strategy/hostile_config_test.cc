// Hostile values in every key of the configs a training run is built from:
// each strategy's config (with its model wrapper, comm hook, wrap policy,
// mixed precision, activation checkpointing), the optimizer wrapper's
// (optimizer, clipping, loss scaling) and the scheduler's. Each key of a
// seed config (every object, array, element and scalar in it) is replaced in
// turn by each value of a list that holds the edges a number, a string and a
// JSON type can take; the strategy is built, prepared and steps twice on two
// simulated ranks. Every rank must end alike: trained, or stopped by the
// engine's error for a caller's mistake (ConfigError, InvalidArgument, a
// DistError naming an unmet precondition) that says what was wrong.
// Anything else, LibTorch's own exception, a crash, a hang or (in CI's
// sanitizer run) undefined behaviour, is a bug in the engine's checks.
//
// config_fuzz feeds random bytes to the registries that build without a
// job; these registries need one, so this sweep runs them in the simulator.
#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <typeinfo>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/registry/config.h"
#include "engine/strategy/strategy.h"
#include "testing/harness.h"
#include "testing/model/nets.h"

namespace {

using engine::registry::Json;

// The strategy and what it prepares: every key each builder reads, set.
struct HostileSeed {
  std::string name;
  Json strategy;
  Json optim_wrapper;
  Json param_scheduler;
};

const Json kEnvironment = {{"seed", 1},
                           {"diff_rank_seed", false},
                           {"deterministic", false},
                           {"seed_process_generator", false},
                           {"launcher", "none"},
                           {"backend", "gloo"},
                           {"timeout_s", 60}};

Json with_environment(Json strategy) {
  strategy.update(kEnvironment);
  return strategy;
}

const Json kScheduler = {{"type", "MultiStepLR"}, {"milestones", {1, 3}}, {"gamma", 0.5}};

std::vector<HostileSeed> seeds() {
  const Json checkpointing = {
      {"check_fn", {{"type", "ModuleWrapPolicy"}, {"module_classes", {"Linear"}}}},
      {"preserve_rng_state", true}};
  const Json power_sgd = {{"type", "PowerSGD"},
                          {"matrix_approximation_rank", 1},
                          {"start_powerSGD_iter", 2},
                          {"min_compression_rate", 0.5},
                          {"use_error_feedback", true},
                          {"warm_start", true},
                          {"orthogonalization_epsilon", 0.0},
                          {"random_seed", 0}};
  const Json ddp_wrapper = {{"type", "MMDistributedDataParallel"},
                            {"detect_anomalous_params", false},
                            {"broadcast_buffers", true},
                            {"find_unused_parameters", false},
                            {"static_graph", false},
                            {"bucket_cap_mb", 1},
                            {"gradient_as_bucket_view", false},
                            {"comm_hook", power_sgd}};
  const Json sgd = {{"type", "SGD"},        {"lr", 0.1},
                    {"momentum", 0.5},      {"dampening", 0.0},
                    {"weight_decay", 0.01}, {"nesterov", false}};
  const Json norm_clip = {{"type", "norm"}, {"max_norm", 1.0}, {"norm_type", 2.0}};
  const Json fsdp_wrapper = {
      {"type", "MMFullyShardedDataParallel"},
      {"sharding_strategy", "FULL_SHARD"},
      {"auto_wrap_policy", {{"type", "size_based_auto_wrap_policy"}, {"min_num_params", 10}}},
      {"sync_module_states", true},
      {"mixed_precision",
       {{"param_dtype", "float64"}, {"reduce_dtype", "float64"}, {"buffer_dtype", "float64"}}},
      {"backward_prefetch", "BACKWARD_PRE"},
      {"forward_prefetch", true},
      {"limit_all_gathers", true},
      {"param_init_fn", {{"type", "normal_init"}, {"std", 0.02}}},
      {"skip_init_weights", false},
      {"device_id", "cpu"},
      {"cpu_offload", {{"offload_params", false}}},
      {"use_orig_params", true}};
  const Json state_dict_cfg = {
      {"state_dict_type", "FULL_STATE_DICT"},
      {"state_dict_config",
       {{"type", "FullStateDictConfig"}, {"offload_to_cpu", true}, {"rank0_only", true}}}};
  return {
      {"ddp",
       with_environment({{"type", "DDPStrategy"},
                         {"model_wrapper", ddp_wrapper},
                         {"sync_bn", "torch"},
                         {"activation_checkpointing", checkpointing}}),
       {{"type", "OptimWrapper"},
        {"optimizer", sgd},
        {"accumulative_counts", 1},
        {"clip_grad", norm_clip}},
       kScheduler},
      {"separate_ddp_amp",
       with_environment({{"type", "DDPStrategy"},
                         {"model_wrapper", {{"type", "MMSeparateDistributedDataParallel"}}},
                         {"activation_checkpointing", {"body"}}}),
       {{"type", "AmpOptimWrapper"},
        {"optimizer",
         {{"type", "Adam"},
          {"lr", 0.01},
          {"betas", {0.9, 0.999}},
          {"eps", 1e-8},
          {"weight_decay", 0.0},
          {"amsgrad", false},
          {"fused", false}}},
        {"dtype", "bfloat16"},
        {"loss_scale",
         {{"init_scale", 256.0},
          {"growth_factor", 2.0},
          {"backoff_factor", 0.5},
          {"growth_interval", 1},
          {"enabled", true}}},
        {"clip_grad", {{"type", "value"}, {"clip_value", 1.0}}}},
       kScheduler},
      {"ddp_zero_redundancy",
       with_environment({{"type", "DDPStrategy"}}),
       {{"optimizer",
         {{"type", "ZeroRedundancyOptimizer"},
          {"optimizer_type", "AdamW"},
          {"lr", 0.01},
          {"parameters_as_bucket_view", false},
          {"overlap_with_ddp", false}}}},
       kScheduler},
      {"fsdp",
       with_environment({{"type", "FSDPStrategy"},
                         {"model_wrapper", fsdp_wrapper},
                         {"skip_init_weights", false},
                         {"state_dict_cfg", state_dict_cfg}}),
       {{"optimizer", {{"type", "AdamW"}, {"lr", 0.01}}}},
       kScheduler},
      {"zero",
       with_environment({{"type", "ZeroStrategy"},
                         {"stage", 2},
                         {"reduce_bucket_size", 100},
                         {"overlap_comm", true},
                         {"contiguous_gradients", true},
                         {"state_dict_type", "full"}}),
       {{"optimizer", sgd}, {"accumulative_counts", 2}},
       kScheduler},
      {"fsdp_hybrid",
       with_environment(
           {{"type", "FSDPStrategy"},
            {"model_wrapper", {{"sharding_strategy", "HYBRID_SHARD"}, {"hybrid_shard_size", 1}}},
            {"state_dict_type", "sharded"}}),
       {{"optimizer", sgd}},
       kScheduler},
      {"single_device",
       with_environment({{"type", "SingleDeviceStrategy"}}),
       {{"optimizer", {{"type", "SGD"}, {"lr", 0.1}, {"momentum", 0.9}, {"nesterov", true}}}},
       kScheduler},
  };
}

// The edges of each JSON type, and each type for every key.
std::vector<Json> hostile_values() {
  return {0,
          -1,
          0.5,
          1e300,
          -1e300,
          Json(9223372036854775807LL),
          Json(18446744073709551615ULL),
          "",
          "?",
          nullptr,
          true,
          Json::array(),
          Json::object()};
}

// Every place a value sits in `value`, below the root: object members and
// array elements, then their insides.
void places_in(const Json& value, const Json::json_pointer& at,
               std::vector<Json::json_pointer>& out) {
  if (value.is_object()) {
    for (const auto& item : value.items()) {
      out.push_back(at / item.key());
      places_in(item.value(), at / item.key(), out);
    }
  } else if (value.is_array()) {
    for (size_t index = 0; index < value.size(); ++index) {
      out.push_back(at / index);
      places_in(value[index], at / index, out);
    }
  }
}

// Each seed's configs as one object, so that one pointer names a place in
// any of them.
Json configs_of(const HostileSeed& seed) {
  return {{"strategy", seed.strategy},
          {"optim_wrapper", seed.optim_wrapper},
          {"param_scheduler", seed.param_scheduler}};
}

// A trunk inside a child "body" (activation checkpointing's target), with
// a BatchNorm (SyncBN's).
nets::NetSpec net_spec() {
  nets::NetSpec spec;
  spec.trunk = {5};
  spec.batch_norm = true;
  spec.nested = true;
  return spec;
}

const nets::NetSpec kNet = net_spec();

// How one rank's run from `configs` ended: "trained", or the engine's error
// for a caller's mistake (InvalidArgument, ConfigError among them, or a bare
// DistError for an unmet precondition) as "<class>: <message>". The
// transport's errors (Timeout, PeerFailure...) and any other exception are
// marked as what the sweep must never see.
std::string train_once(const Json& configs, int rank) {
  try {
    auto strategy = engine::strategy::strategies().build(configs.at("strategy"));
    strategy->setup_env();
    const auto& prepared = strategy->prepare(nets::make_net(kNet), configs.at("optim_wrapper"),
                                             configs.at("param_scheduler"));
    for (uint64_t step = 0; step < 2; ++step) {
      prepared.model->train_step(nets::make_batch(kNet, 3, step * 2 + rank, {true}),
                                 *prepared.optim_wrapper);
    }
    return "trained";
  } catch (const engine::dist::InvalidArgument& error) {
    return std::string("InvalidArgument: ") + error.what();
  } catch (const std::exception& error) {
    if (typeid(error) == typeid(engine::dist::DistError)) {
      return std::string("DistError: ") + error.what();
    }
    return std::string("not the engine's error for a mistake: ") + typeid(error).name() + ": " +
           error.what();
  }
}

// The outcome's kind: "trained" or the error's class.
std::string kind_of(const std::string& outcome) { return outcome.substr(0, outcome.find(':')); }

bool engine_outcome(const std::string& outcome) {
  const std::string kind = kind_of(outcome);
  return kind == "trained" || kind == "InvalidArgument" || kind == "DistError";
}

TEST(HostileConfigTest, EachSeedTrains) {
  for (const HostileSeed& seed : seeds()) {
    const auto outcomes = harness::collect_ranks<std::string>(
        2, [&](int rank) { return train_once(configs_of(seed), rank); });
    EXPECT_EQ(outcomes, std::vector<std::string>(2, "trained")) << seed.name;
  }
}

TEST(HostileConfigTest, EveryKeyTakesEveryEdgeAsATypedErrorOrTrains) {
  int cases = 0, trained = 0;
  for (const HostileSeed& seed : seeds()) {
    const Json configs = configs_of(seed);
    std::vector<Json::json_pointer> places;
    for (const auto& section : configs.items()) {
      places_in(section.value(), Json::json_pointer("/" + section.key()), places);
    }
    for (const auto& place : places) {
      for (const Json& value : hostile_values()) {
        Json hostile = configs;
        hostile[place] = value;
        const auto outcomes = harness::collect_ranks<std::string>(
            2, [&](int rank) { return train_once(hostile, rank); });
        ++cases;
        trained += outcomes[0] == "trained";
        const std::string where = seed.name + " " + place.to_string() + " = " + value.dump();
        EXPECT_TRUE(engine_outcome(outcomes[0])) << where << ": " << outcomes[0];
        EXPECT_EQ(kind_of(outcomes[1]), kind_of(outcomes[0]))
            << where << ": the ranks ended otherwise: " << outcomes[0] << " | " << outcomes[1];
      }
    }
  }
  // Most hostile values are errors; those that train show the seeds reach
  // the step.
  EXPECT_GT(trained, 0);
  RecordProperty("cases", cases);
  RecordProperty("trained", trained);
}

}  // namespace
