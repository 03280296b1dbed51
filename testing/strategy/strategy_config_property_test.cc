// Every distributed strategy built from a JSON config (DDPStrategy with
// either DDP wrapper, FSDPStrategy with each sharding strategy and wrap
// policy, ZeroStrategy at every stage) hands its options to its wrapper:
// ranks that build their models from different seeds end every step
// bit-identical to each other and with the parameters and buffers one
// process reaches from the first rank's model on the concatenated batch.
// A key a strategy drops (module-state synchronisation, accumulation,
// clipping) shows as a rank that keeps its own state or steps otherwise.
// The checkpoint each case saves at its end holds, bit for bit, the state
// it trained.
#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <torch/types.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>

#include "engine/checkpoint/file.h"
#include "engine/checkpoint/state_dict.h"
#include "engine/model/batch_norm.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/registry/registry.h"
#include "engine/strategy/strategy.h"
#include "testing/cases.h"
#include "testing/harness.h"
#include "testing/model/ddp_cases.h"
#include "testing/model/nets.h"
#include "testing/property.h"

namespace {

using engine::registry::Json;

struct ConfigCase {
  ddp_cases::TrainingCase training;  // the net, batches, accumulation and clipping
  Json strategy;
};

void showValue(const ConfigCase& c, std::ostream& os) {
  os << "strategy=" << c.strategy.dump() << " ";
  ddp_cases::showValue(c.training, os);
}

Json wrap_policy() {
  switch (*rc::gen::inRange(0, 3)) {
    case 0:
      return nullptr;  // one unit
    case 1:
      return {{"type", "ModuleWrapPolicy"}, {"module_classes", {"Linear"}}};
    default:
      return {{"type", "size_based_auto_wrap_policy"},
              {"min_num_params", *rc::gen::inRange(1, 60)}};
  }
}

Json ddp_strategy() {
  Json wrapper = {{"type", *rc::gen::element<std::string>("MMDistributedDataParallel",
                                                          "MMSeparateDistributedDataParallel")}};
  if (wrapper["type"] == "MMDistributedDataParallel") {
    wrapper["bucket_cap_mb"] = *rc::gen::element(0.0001, 0.001, 25.0);
    wrapper["broadcast_buffers"] = *rc::gen::arbitrary<bool>();
    wrapper["gradient_as_bucket_view"] = *rc::gen::arbitrary<bool>();
    if (*rc::gen::arbitrary<bool>()) wrapper["comm_hook"] = {{"type", "allreduce"}};
  }
  return {{"type", "DDPStrategy"}, {"model_wrapper", wrapper}};
}

Json fsdp_strategy() {
  Json wrapper = {{"sharding_strategy",
                   *rc::gen::element<std::string>("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD")},
                  {"sync_module_states", true},
                  {"backward_prefetch",
                   *rc::gen::element<std::string>("BACKWARD_PRE", "BACKWARD_POST", "NONE")},
                  {"forward_prefetch", *rc::gen::arbitrary<bool>()}};
  Json policy = wrap_policy();
  if (!policy.is_null()) wrapper["auto_wrap_policy"] = policy;
  return {{"type", "FSDPStrategy"}, {"model_wrapper", wrapper}, {"state_dict_type", "full"}};
}

Json zero_strategy() {
  return {{"type", "ZeroStrategy"},
          {"stage", *rc::gen::inRange(1, 4)},
          {"reduce_bucket_size", *rc::gen::inRange(1, 200)},
          {"overlap_comm", *rc::gen::arbitrary<bool>()},
          {"state_dict_type", "full"}};
}

rc::Gen<ConfigCase> config_case() {
  return rc::gen::exec([] {
    ConfigCase c;
    c.training = *ddp_cases::training_case(*rc::gen::inRange(1, harness::max_world_size(4) + 1));
    ddp_cases::TrainingCase& t = c.training;
    // Strategies train on the default group, every head on every rank, in
    // one order (FSDP gathers its units in one order on every rank).
    t.members = cases::all_ranks(t.world_size);
    for (int it = 0; it < t.iterations; ++it) {
      t.used_heads[it].assign(t.world_size, std::vector<bool>(t.spec.heads, true));
      t.head_order[it].assign(t.world_size, t.head_order[it].front());
    }
    if (t.clip_grad && std::isinf(t.clip_grad->norm_type)) t.clip_grad->norm_type = 2.0;
    switch (*rc::gen::inRange(0, 3)) {
      case 0:
        c.strategy = ddp_strategy();
        break;
      case 1:
        c.strategy = fsdp_strategy();
        break;
      default:
        c.strategy = zero_strategy();
    }
    if (*rc::gen::arbitrary<bool>()) {
      // Layers recomputed in the backward train as they would without.
      c.strategy["activation_checkpointing"] = {
          {"check_fn", {{"type", "ModuleWrapPolicy"}, {"module_classes", {"Linear", "Conv2d"}}}}};
    }
    if (t.spec.batch_norm && c.strategy["type"] != "ZeroStrategy") c.strategy["sync_bn"] = "torch";
    c.strategy["seed"] = 1;
    c.strategy["seed_process_generator"] = false;  // simulated ranks share the process
    return c;
  });
}

Json optim_config(const ddp_cases::TrainingCase& t) {
  Json config = {{"optimizer", {{"type", "SGD"}, {"lr", 0.1}, {"momentum", 0.5}}},
                 {"accumulative_counts", t.accumulative_counts}};
  if (t.clip_grad) {
    const auto& clip = *t.clip_grad;
    config["clip_grad"] =
        clip.kind == engine::optim::ClipGrad::Kind::kNorm
            ? Json{{"type", "norm"}, {"max_norm", clip.max_norm}, {"norm_type", clip.norm_type}}
            : Json{{"type", "value"}, {"clip_value", clip.clip_value}};
  }
  return config;
}

// Parameters (gathered whole under FSDP) and buffers, on the CPU.
std::map<std::string, at::Tensor> state_of(engine::strategy::BaseStrategy& strategy) {
  auto state = nets::snapshot(strategy.module());
  if (auto* fsdp = dynamic_cast<engine::model::MMFullyShardedDataParallel*>(
          strategy.prepared().model.get())) {
    state = fsdp->full_parameters();
  }
  state.merge(nets::buffers_of(strategy.module()));
  return ddp_cases::on_cpu(state);
}

// A fresh path for the checkpoint a case exports at its end.
std::string export_path() {
  static int cases = 0;
  const auto dir = std::filesystem::path(::testing::TempDir()) / "strategy_configs";
  std::filesystem::create_directories(dir);
  return (dir / ("case" + std::to_string(++cases) + ".pth")).string();
}

// Trains, then saves a checkpoint to `path` (one file: FSDP and ZeRO write
// it full, gathered to rank 0).
ddp_cases::Snapshots train_rank(const ConfigCase& c, const nets::TestNet& initial, int rank,
                                const std::string& path) {
  const ddp_cases::TrainingCase& t = c.training;
  auto net = nets::make_net(t.spec);
  ddp_cases::set_starting_state(*net, initial, rank, t.seed, rank);
  if (t.spec.batch_norm && c.strategy["type"] == "ZeroStrategy") {
    engine::model::convert_sync_batchnorm(*net);  // ZeroStrategy has no sync_bn: by hand
  }
  auto strategy = engine::strategy::strategies().build(c.strategy);
  strategy->setup_env();
  const auto& prepared = strategy->prepare(net, optim_config(t));
  ddp_cases::Snapshots snapshots;
  for (int it = 0; it < t.iterations; ++it) {
    prepared.model->train_step(ddp_cases::batch_of(t, it, rank), *prepared.optim_wrapper);
    snapshots.push_back(state_of(*strategy));
  }
  strategy->save_checkpoint(path, {t.iterations, 0});
  return snapshots;
}

// The first difference between the model state a checkpoint holds and
// `trained`, bit for bit; nullopt when they agree.
std::optional<std::string> export_difference(const std::string& path,
                                             const std::map<std::string, at::Tensor>& trained) {
  const auto saved = engine::checkpoint::from_dict(
      engine::checkpoint::load_file(path).toGenericDict().at("state_dict").toGenericDict());
  if (saved.size() != trained.size()) {
    return "the checkpoint holds " + std::to_string(saved.size()) + " entries, the model " +
           std::to_string(trained.size());
  }
  for (const auto& [name, value] : trained) {
    const auto found = saved.find(name);
    if (found == saved.end()) return "the checkpoint lacks " + name;
    if (!torch::equal(found->second, value))
      return "the checkpoint's " + name + " is not as trained";
  }
  return std::nullopt;
}

HARNESS_PROP(StrategyConfigs, RanksFromDifferentSeedsTrainLikeOneProcess, ()) {
  const ConfigCase c = *config_case();
  torch::manual_seed(c.training.seed);
  auto initial = nets::make_net(c.training.spec);
  const auto expected = ddp_cases::train_serial(c.training, *initial);
  const std::string path = export_path();
  const auto per_rank = harness::collect_ranks<ddp_cases::Snapshots>(
      c.training.world_size, [&](int rank) { return train_rank(c, *initial, rank, path); },
      harness::test_options(c.training.seed));
  if (auto departure = ddp_cases::first_departure(expected, per_rank[0], "rank 0")) {
    RC_FAIL(*departure);
  }
  for (int rank = 1; rank < c.training.world_size; ++rank) {
    if (auto difference = ddp_cases::first_difference(per_rank[0], 0, per_rank[rank], rank)) {
      RC_FAIL(*difference);
    }
  }
  // What a user exports is what was trained.
  if (auto difference = export_difference(path, per_rank[0].back())) RC_FAIL(*difference);
}

}  // namespace
