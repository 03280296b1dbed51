#include "engine/strategy/strategy.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/checkpoint/all_ranks.h"
#include "engine/checkpoint/file.h"
#include "engine/dist/dist.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/model/wrappers/separate_distributed_data_parallel.h"
#include "engine/model/wrappers/wrapper_registry.h"
#include "engine/model/wrappers/zero_data_parallel.h"
#include "engine/optim/optimizer_state.h"
#include "engine/optim/param_scheduler.h"
#include "engine/strategy/fsdp_strategy.h"
#include "examples/classifier.h"
#include "testing/harness.h"

namespace {

using engine::registry::ConfigError;
using engine::registry::Json;
using engine::strategy::strategies;

std::string error_of(const Json& config) {
  try {
    strategies().build(config);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "no error";
}

std::shared_ptr<examples::Classifier> small_model(uint64_t seed) {
  auto rng = at::make_generator<at::CPUGeneratorImpl>(seed);
  return std::make_shared<examples::Classifier>(examples::ClassifierOptions{3, 5, 2}, rng);
}

const Json kOptim = {{"optimizer", {{"type", "SGD"}, {"lr", 0.1}}}};

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "strategy";
  std::filesystem::create_directories(dir);
  std::filesystem::remove_all(dir / name);
  return (dir / name).string();
}

TEST(StrategyRegistryTest, ConfigMistakesAreNamed) {
  EXPECT_NE(error_of({{"type", "FSDP"}})
                .find("STRATEGIES has the unknown type \"FSDP\"; known types: DDPStrategy, "
                      "FSDPStrategy, SingleDeviceStrategy"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "DDPStrategy"}, {"find_unused_parameters", true}})
                .find("STRATEGIES (DDPStrategy) has unknown key(s) find_unused_parameters"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "DDPStrategy"}, {"sync_bn", "mmcv"}})
                .find("DDPStrategy: key \"sync_bn\" must be"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "FSDPStrategy"}, {"sync_bn", "mmcv"}})
                .find("FSDPStrategy: key \"sync_bn\" must be"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "SingleDeviceStrategy"}, {"seed", "7"}})
                .find("key \"seed\" must be an integer that fits 64 bits, not string"),
            std::string::npos);
  // Beyond a year, seconds in milliseconds would leave int64_t.
  for (const double timeout_s : {0.0, -1.0, 3.2e7, 1e300}) {
    EXPECT_NE(error_of({{"type", "DDPStrategy"}, {"timeout_s", timeout_s}})
                  .find("key \"timeout_s\" must be positive and at most a year"),
              std::string::npos)
        << timeout_s;
  }
  EXPECT_EQ(error_of({{"type", "DDPStrategy"}, {"timeout_s", 3.1e7}}), "no error");
  // A size DeepSpeed writes as 5e8 is read as a number; it must be whole
  // and held by int64_t.
  for (const double size : {0.0, 2.5, 1e300, -1e300}) {
    EXPECT_NE(error_of({{"type", "ZeroStrategy"}, {"reduce_bucket_size", size}})
                  .find("key \"reduce_bucket_size\" must be a whole number from 1 to "
                        "9007199254740992"),
              std::string::npos)
        << size;
  }
  EXPECT_EQ(error_of({{"type", "ZeroStrategy"}, {"reduce_bucket_size", 5e8}}), "no error");
}

TEST(StrategyTest, SeedsAreSharedUnlessDiffRankSeed) {
  const auto seeds = harness::collect_ranks<std::vector<int64_t>>(3, [](int) {
    auto shared = strategies().build({{"type", "DDPStrategy"}, {"seed_process_generator", false}});
    shared->setup_env();
    auto per_rank = strategies().build({{"type", "DDPStrategy"},
                                        {"seed", 100},
                                        {"diff_rank_seed", true},
                                        {"seed_process_generator", false}});
    per_rank->setup_env();
    return std::vector<int64_t>{shared->seed(), per_rank->seed(), per_rank->shared_seed(),
                                at::randint(1 << 30, {1}, per_rank->generator()).item<int64_t>()};
  });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(seeds[rank][0], seeds[0][0]) << "sync_random_seed must agree";
    EXPECT_EQ(seeds[rank][1], 100 + rank);
    EXPECT_EQ(seeds[rank][2], 100);
  }
  EXPECT_NE(seeds[0][3], seeds[1][3]) << "per-rank generators must differ";
}

TEST(StrategyTest, DdpPrepareWrapsOnceWithMmengineDefaultsAndConvertsBatchNorm) {
  harness::run_ranks(2, [](int rank) {
    auto strategy = strategies().build({{"type", "DDPStrategy"},
                                        {"sync_bn", "torch"},
                                        {"seed_process_generator", false},
                                        {"model_wrapper", {{"find_unused_parameters", true}}}});
    auto model = small_model(rank);  // different weights: the wrapper broadcasts rank 0's
    const auto& first = strategy->prepare(model, kOptim);
    const auto& again = strategy->prepare(small_model(9), kOptim);
    EXPECT_EQ(&first, &again);
    EXPECT_TRUE(engine::model::is_model_wrapper(*first.model));
    EXPECT_EQ(&strategy->module(), model.get());
    auto* ddp = dynamic_cast<engine::model::MMDistributedDataParallel*>(first.model.get());
    ASSERT_NE(ddp, nullptr);
    EXPECT_TRUE(ddp->reducer().options().find_unused_parameters);
    auto* norm = model->named_modules()["norm"]->as<engine::model::BatchNormImpl>();
    ASSERT_NE(norm, nullptr);
    EXPECT_TRUE(norm->is_sync());
  });
}

TEST(StrategyTest, FsdpConvertsBatchNormOnlyWhenAsked) {
  harness::run_ranks(2, [](int) {
    for (const bool sync : {false, true}) {
      Json config = {{"type", "FSDPStrategy"}, {"seed_process_generator", false}};
      if (sync) config["sync_bn"] = "torch";
      auto strategy = strategies().build(config);
      auto model = small_model(1);
      strategy->prepare(model, kOptim);
      auto* norm = model->named_modules()["norm"]->as<engine::model::BatchNormImpl>();
      ASSERT_NE(norm, nullptr);
      EXPECT_EQ(norm->is_sync(), sync);
    }
  });
}

TEST(StrategyTest, TheSeparateWrapperIsBuiltByName) {
  EXPECT_EQ(engine::model::model_wrappers().names(),
            (std::vector<std::string>{"MMDistributedDataParallel", "MMFullyShardedDataParallel",
                                      "MMSeparateDistributedDataParallel", "MMZeroDataParallel"}));
  harness::run_ranks(2, [](int) {
    auto strategy = strategies().build(
        {{"type", "DDPStrategy"},
         {"seed_process_generator", false},
         {"model_wrapper", {{"type", "MMSeparateDistributedDataParallel"}, {"bucket_cap_mb", 1}}}});
    const auto& prepared = strategy->prepare(small_model(1), kOptim);
    auto* separate =
        dynamic_cast<engine::model::MMSeparateDistributedDataParallel*>(prepared.model.get());
    ASSERT_NE(separate, nullptr);
    EXPECT_EQ(separate->reducers().size(), 3u);  // hidden, norm, output
  });
}

TEST(StrategyTest, TheShardedWrapperIsBuiltByNameWithItsKeys) {
  harness::run_ranks(2, [](int rank) {
    const Json config = {
        {"type", "MMFullyShardedDataParallel"},
        {"sharding_strategy", "shard_grad_op"},
        {"sync_module_states", true},
        {"use_orig_params", true},
        {"auto_wrap_policy", {{"type", "ModuleWrapPolicy"}, {"module_classes", {"Linear"}}}}};
    auto built = engine::model::model_wrappers().build(config, small_model(rank));
    auto* fsdp = dynamic_cast<engine::model::MMFullyShardedDataParallel*>(built.get());
    ASSERT_NE(fsdp, nullptr);
    EXPECT_EQ(fsdp->options().sharding_strategy, engine::model::ShardingStrategy::kShardGradOp);
    EXPECT_TRUE(fsdp->options().sync_module_states);
    EXPECT_GE(fsdp->units().size(), 3u);  // the root and two Linear layers at least
    Json by_size = config;
    by_size["auto_wrap_policy"] = {{"type", "size_based_auto_wrap_policy"}, {"min_num_params", 1}};
    auto sized = engine::model::model_wrappers().build(by_size, small_model(rank));
    EXPECT_GT(dynamic_cast<engine::model::MMFullyShardedDataParallel&>(*sized).units().size(), 1u);
    Json unknown_policy = config;
    unknown_policy["auto_wrap_policy"] = {{"type", "always_wrap"}};
    EXPECT_THROW(engine::model::model_wrappers().build(unknown_policy, small_model(rank)),
                 ConfigError);
    Json unknown_strategy = config;
    unknown_strategy["sharding_strategy"] = "SHARD_EVERYTHING";
    EXPECT_THROW(engine::model::model_wrappers().build(unknown_strategy, small_model(rank)),
                 engine::dist::InvalidArgument);
  });
}

TEST(StrategyTest, MixedPrecisionIsReadAsMmengineWritesIt) {
  harness::run_ranks(2, [](int rank) {
    Json config = {{"type", "MMFullyShardedDataParallel"},
                   {"mixed_precision", {{"param_dtype", "bfloat16"}, {"buffer_dtype", "double"}}}};
    auto built = engine::model::model_wrappers().build(config, small_model(rank));
    const auto& precision =
        dynamic_cast<engine::model::MMFullyShardedDataParallel&>(*built).options().mixed_precision;
    EXPECT_EQ(precision.param_dtype, at::kBFloat16);
    EXPECT_EQ(precision.reduce_dtype, std::nullopt);
    EXPECT_EQ(precision.buffer_dtype, at::kDouble);
    for (const Json& bad : {Json{{"param_dtype", "bf16"}}, Json{{"reduce_dtype", "int32"}},
                            Json{{"compute_dtype", "float16"}}}) {
      config["mixed_precision"] = bad;
      try {
        engine::model::model_wrappers().build(config, small_model(rank));
        ADD_FAILURE() << bad.dump() << " was accepted";
      } catch (const ConfigError& error) {
        EXPECT_NE(std::string(error.what()).find(bad.begin().key()), std::string::npos)
            << error.what();
      }
    }
  });
}

TEST(StrategyTest, PrefetchingIsReadAsMmengineWritesIt) {
  harness::run_ranks(2, [](int rank) {
    using engine::model::BackwardPrefetch;
    auto options_of = [&](const Json& config) {
      auto built = engine::model::model_wrappers().build(config, small_model(rank));
      return dynamic_cast<engine::model::MMFullyShardedDataParallel&>(*built).options();
    };
    Json config = {{"type", "MMFullyShardedDataParallel"}};
    const auto defaults = options_of(config);
    EXPECT_EQ(defaults.backward_prefetch, BackwardPrefetch::kBackwardPre);
    EXPECT_FALSE(defaults.forward_prefetch);
    EXPECT_TRUE(defaults.limit_all_gathers);
    config.update({{"backward_prefetch", "BACKWARD_POST"},
                   {"forward_prefetch", true},
                   {"limit_all_gathers", false}});
    const auto set = options_of(config);
    EXPECT_EQ(set.backward_prefetch, BackwardPrefetch::kBackwardPost);
    EXPECT_TRUE(set.forward_prefetch);
    EXPECT_FALSE(set.limit_all_gathers);
    config["backward_prefetch"] = nullptr;  // mmengine's None
    EXPECT_EQ(options_of(config).backward_prefetch, BackwardPrefetch::kNone);
    for (const Json& bad : {Json("BACKWARD_SOON"), Json(1)}) {
      config["backward_prefetch"] = bad;
      try {
        options_of(config);
        ADD_FAILURE() << bad.dump() << " was accepted";
      } catch (const ConfigError& error) {
        EXPECT_NE(std::string(error.what()).find("backward_prefetch"), std::string::npos)
            << error.what();
      }
    }
  });
}

TEST(StrategyTest, ZeroStrategyBuildsTheWrapperOfItsStageFromDeepSpeedKeys) {
  harness::run_ranks(2, [](int rank) {
    const Json base = {{"type", "ZeroStrategy"},
                       {"seed_process_generator", false},
                       {"reduce_bucket_size", 5e8},
                       {"overlap_comm", true},
                       {"contiguous_gradients", true}};
    for (int stage : {1, 2}) {
      Json config = base;
      config["stage"] = stage;
      auto strategy = strategies().build(config);
      const auto& prepared = strategy->prepare(small_model(rank), kOptim);
      auto* zero = dynamic_cast<engine::model::MMZeroDataParallel*>(prepared.model.get());
      ASSERT_NE(zero, nullptr);
      EXPECT_EQ(zero->zero_options().stage, stage);
      EXPECT_EQ(zero->zero_options().reduce_bucket_size, 500'000'000);
      EXPECT_TRUE(zero->zero_options().overlap_comm);
    }
    Json third = base;
    third["stage"] = 3;
    auto strategy = strategies().build(third);
    const auto& prepared = strategy->prepare(small_model(rank), kOptim);
    auto* fsdp = dynamic_cast<engine::model::MMFullyShardedDataParallel*>(prepared.model.get());
    ASSERT_NE(fsdp, nullptr);
    EXPECT_EQ(dynamic_cast<engine::model::MMZeroDataParallel*>(fsdp), nullptr);
    EXPECT_EQ(fsdp->options().sharding_strategy, engine::model::ShardingStrategy::kFullShard);
    for (const Json& bad : {Json{{"stage", 0}}, Json{{"stage", 4}}, Json{{"reduce_bucket_size", 0}},
                            Json{{"allgather_bucket_size", 5e8}}}) {
      Json config = base;
      config.update(bad);
      EXPECT_THROW(strategies().build(config), ConfigError) << bad.dump();
    }
  });
}

TEST(StrategyTest, StateDictCfgIsReadAsMmengineWritesIt) {
  using engine::strategy::FSDPStrategy;
  using engine::strategy::StateDictType;
  const std::vector<std::pair<Json, StateDictType>> read{
      {"local", StateDictType::kSharded},
      {"full", StateDictType::kFull},
      {Json::object(), StateDictType::kSharded},
      {{{"state_dict_type", "FULL_STATE_DICT"},
        {"state_dict_config", {{"type", "FullStateDictConfig"}, {"offload_to_cpu", true}}},
        {"optim_state_dict_config",
         {{"type", "FullOptimStateDictConfig"}, {"offload_to_cpu", true}, {"rank0_only", true}}}},
       StateDictType::kFull},
      {{{"state_dict_type", "LOCAL_STATE_DICT"}}, StateDictType::kSharded}};
  for (const auto& [cfg, expected] : read) {
    auto strategy = strategies().build({{"type", "FSDPStrategy"}, {"state_dict_cfg", cfg}});
    EXPECT_EQ(dynamic_cast<FSDPStrategy&>(*strategy).options().state_dict_type, expected)
        << cfg.dump();
  }
  const std::vector<std::pair<Json, std::string>> refused{
      {{{"state_dict_cfg", "half"}}, "unknown state_dict_type \"half\""},
      {{{"state_dict_cfg", "full"}, {"state_dict_type", "full"}}, "not both"},
      {{{"state_dict_cfg",
         {{"state_dict_type", "FULL_STATE_DICT"},
          {"state_dict_config", {{"type", "FullStateDictConfig"}, {"rank0_only", false}}}}}},
       "rank0_only false"},
      {{{"state_dict_cfg", {{"state_dict_config", {{"type", "HalfStateDictConfig"}}}}}},
       "unknown type \"HalfStateDictConfig\""}};
  for (const auto& [keys, expected] : refused) {
    Json config = {{"type", "FSDPStrategy"}};
    config.update(keys);
    EXPECT_NE(error_of(config).find(expected), std::string::npos) << error_of(config);
  }
}

TEST(StrategyTest, ZeroStrategyConvertsBatchNormWhenAsked) {
  harness::run_ranks(2, [](int rank) {
    for (const bool sync : {false, true}) {
      Json config = {{"type", "ZeroStrategy"}, {"stage", 2}, {"seed_process_generator", false}};
      if (sync) config["sync_bn"] = "torch";
      auto strategy = strategies().build(config);
      auto model = small_model(rank);
      strategy->prepare(model, kOptim);
      auto* norm = model->named_modules()["norm"]->as<engine::model::BatchNormImpl>();
      ASSERT_NE(norm, nullptr);
      EXPECT_EQ(norm->is_sync(), sync);
    }
  });
  EXPECT_NE(error_of({{"type", "ZeroStrategy"}, {"sync_bn", "mmcv"}})
                .find("ZeroStrategy: key \"sync_bn\" must be"),
            std::string::npos);
}

// A scheduler built before prepare() on the caller's own optimizer comes
// back rebuilt on the prepared optimizer, its step count kept, under every
// strategy (mmengine's FSDPStrategy loses it).
TEST(StrategyTest, ABuiltSchedulerIsRebuiltOnThePreparedOptimizerAndKept) {
  for (const char* type : {"SingleDeviceStrategy", "DDPStrategy", "FSDPStrategy", "ZeroStrategy"}) {
    SCOPED_TRACE(type);
    harness::run_ranks(2, [&](int) {
      auto strategy = strategies().build({{"type", type}, {"seed_process_generator", false}});
      auto model = small_model(1);
      torch::optim::SGD own(model->parameters(), torch::optim::SGDOptions(0.5));
      engine::optim::MultiStepLR built(own, {2, 4}, 0.1);
      for (int i = 0; i < 3; ++i) built.step();
      const auto& prepared = strategy->prepare(model, kOptim, built);
      ASSERT_NE(prepared.param_scheduler, nullptr);
      auto& optimizer = prepared.optim_wrapper->optimizer();
      EXPECT_EQ(prepared.param_scheduler->last_step(), 3);
      EXPECT_DOUBLE_EQ(optimizer.param_groups()[0].options().get_lr(), 0.1 * 0.1);
      prepared.param_scheduler->step();
      EXPECT_DOUBLE_EQ(optimizer.param_groups()[0].options().get_lr(), 0.1 * 0.1 * 0.1);
      EXPECT_DOUBLE_EQ(own.param_groups()[0].options().get_lr(), 0.5 * 0.1);
    });
  }
}

TEST(StrategyTest, ModelWrapperConfigErrorsSurfaceAtPrepare) {
  harness::run_ranks(2, [](int) {
    auto strategy = strategies().build({{"type", "DDPStrategy"},
                                        {"seed_process_generator", false},
                                        {"model_wrapper", {{"type", "DataParallel"}}}});
    EXPECT_THROW(strategy->prepare(small_model(1), kOptim), ConfigError);
  });
}

TEST(StrategyTest, CheckpointsRoundTripWithExtraDataUntouchedAndPrefixesRevised) {
  const std::string path = temp_path("roundtrip.pth");
  harness::run_ranks(2, [&](int rank) {
    auto strategy =
        strategies().build({{"type", "DDPStrategy"}, {"seed_process_generator", false}});
    strategy->prepare(small_model(1), kOptim);
    auto extra = engine::strategy::empty_extra();
    extra.insert("note", std::string("kept"));
    strategy->save_checkpoint(path, {7, 2}, extra);
    // Every rank returns only once the file is complete.
    EXPECT_TRUE(std::filesystem::exists(path)) << "rank " << rank;
    EXPECT_EQ(extra.size(), 1u);

    auto fresh = strategies().build({{"type", "DDPStrategy"}, {"seed_process_generator", false}});
    fresh->prepare(small_model(2), kOptim);
    const auto resumed = fresh->resume(path);
    EXPECT_EQ(resumed.progress.iter, 7);
    EXPECT_EQ(resumed.progress.epoch, 2);
    EXPECT_EQ(resumed.extra.at("note").toStringRef(), "kept");
    const auto saved = engine::checkpoint::load_file(path).toGenericDict();
    for (const auto& item : saved.at("state_dict").toGenericDict()) {
      const std::string key = item.key().toStringRef();
      EXPECT_EQ(key.rfind("module.", 0), std::string::npos) << "saved unwrapped: " << key;
      EXPECT_TRUE(at::equal(item.value().toTensor(),
                            engine::checkpoint::state_dict(fresh->module()).at(key)));
    }
  });
}

// Where a strategy keeps its optimizer state in a checkpoint.
struct OptimizerEntry {
  Json config;
  std::string file;  // inside the checkpoint's folder, or "" for the checkpoint itself
  std::string key;   // in the file's dict, or in its "common" dict for an index
};

std::vector<OptimizerEntry> optimizer_entries() {
  return {{{{"type", "DDPStrategy"}}, "", "optimizer"},
          {{{"type", "FSDPStrategy"}, {"state_dict_type", "full"}}, "", "optimizer"},
          {{{"type", "FSDPStrategy"}, {"state_dict_type", "sharded"}},
           "index.ckpt",
           "optimizer_groups"}};
}

// Resuming, on each of 2 ranks, from a checkpoint whose optimizer state (or
// another entry beside it) was replaced by `optimizer`: the error of each
// rank.
std::vector<std::string> resume_errors(const OptimizerEntry& entry, const c10::IValue& optimizer,
                                       const Json& optim = kOptim) {
  const std::string path = temp_path("optimizer_" + entry.key + ".pth");
  Json config = entry.config;
  config["seed_process_generator"] = false;
  return harness::collect_ranks<std::string>(2, [&](int rank) {
    auto strategy = strategies().build(config);
    strategy->prepare(small_model(1), optim);
    strategy->save_checkpoint(path, {1, 0});
    if (rank == 0) {
      const std::string file = entry.file.empty() ? path : path + "/" + entry.file;
      auto content = engine::checkpoint::load_file(file).toGenericDict();
      auto holder = entry.file.empty() ? content : content.at("common").toGenericDict();
      holder.insert_or_assign(entry.key, optimizer);
      engine::checkpoint::save_file(file, content);
    }
    engine::dist::barrier();
    auto fresh = strategies().build(config);
    fresh->prepare(small_model(2), optim);
    try {
      fresh->resume(path);
    } catch (const engine::checkpoint::CheckpointError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  });
}

// Earlier engines kept LibTorch's archive of the optimizer, a TorchScript
// module: loading one compiles and runs the code inside it.
TEST(StrategyTest, AnOptimizerKeptAsLibTorchsArchiveIsRefusedOnResume) {
  for (const OptimizerEntry& entry : optimizer_entries()) {
    for (const std::string& error : resume_errors(entry, at::zeros({64}, at::kByte))) {
      EXPECT_NE(error.find("\"" + entry.key + "\" entry is LibTorch's optimizer archive"),
                std::string::npos)
          << entry.config << ": " << error;
    }
  }
}

TEST(StrategyTest, AnOptimizerStateOfAnotherLayoutIsACheckpointErrorSayingWhat) {
  auto layout = engine::optim::empty_value_dict();
  layout.insert("state", engine::optim::empty_value_dict());
  for (const OptimizerEntry& entry : optimizer_entries()) {
    for (const std::string& error : resume_errors(entry, layout)) {
      EXPECT_NE(error.find("'s \"" + entry.key +
                           "\" entry is not an optimizer state_dict: it has no \"param_groups\""),
                std::string::npos)
          << entry.config << ": " << error;
    }
  }
}

TEST(StrategyTest, AnAmpScalerStateThatIsNotOneIsACheckpointErrorSayingWhat) {
  const Json amp = {{"type", "AmpOptimWrapper"},
                    {"loss_scale", "dynamic"},
                    {"optimizer", {{"type", "SGD"}, {"lr", 0.1}}}};
  auto scaler = engine::optim::empty_value_dict();
  scaler.insert("scale", -1.0);
  scaler.insert("_growth_tracker", int64_t{0});
  auto negative = engine::optim::empty_value_dict();
  negative.insert("loss_scaler", scaler);
  for (OptimizerEntry entry : optimizer_entries()) {
    entry.key = "optim_wrapper";
    for (const std::string& error : resume_errors(entry, 3, amp)) {
      EXPECT_NE(error.find("\"optim_wrapper\" entry is not a dict"), std::string::npos)
          << entry.config << ": " << error;
    }
    for (const std::string& error : resume_errors(entry, negative, amp)) {
      EXPECT_NE(error.find("\"optim_wrapper\" entry cannot be restored: [rank "), std::string::npos)
          << error;
      EXPECT_NE(error.find("a saved scale must be finite and positive"), std::string::npos)
          << entry.config << ": " << error;
    }
  }
}

// The one helper behind every checkpoint write and read that spans ranks.
TEST(CheckpointAgreement, EveryRankThrowsTheSameErrorNamingEachRankThatFailed) {
  const auto errors = harness::collect_ranks<std::string>(3, [](int rank) {
    const std::string failure = rank == 1 ? "" : "disk " + std::to_string(rank) + " full";
    try {
      engine::checkpoint::throw_if_any_rank_failed(failure, "write x");
    } catch (const engine::checkpoint::CheckpointError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(errors[rank], "[rank " + std::to_string(rank) +
                                "] rank 0 could not write x: disk 0 full\n"
                                "  rank 2 could not write x: disk 2 full");
  }
  const auto none = harness::collect_ranks<std::string>(3, [](int) {
    engine::checkpoint::throw_if_any_rank_failed("", "write x");
    return std::string("went on");
  });
  for (const auto& outcome : none) EXPECT_EQ(outcome, "went on");
}

TEST(StrategyTest, AFailedSaveAndACorruptFileFailOnEveryRank) {
  const std::string blocker = temp_path("not_a_folder");
  std::ofstream(blocker) << "x";
  const std::string corrupt = temp_path("corrupt.pth");
  std::ofstream(corrupt) << std::string(64, 'z');
  const auto errors = harness::collect_ranks<std::vector<std::string>>(3, [&](int) {
    auto strategy =
        strategies().build({{"type", "DDPStrategy"}, {"seed_process_generator", false}});
    strategy->prepare(small_model(1), kOptim);
    std::vector<std::string> out;
    try {
      strategy->save_checkpoint(blocker + "/ckpt.pth", {1, 0});
    } catch (const engine::checkpoint::CheckpointError& error) {
      out.push_back(error.what());
    }
    try {
      strategy->load_checkpoint(corrupt);
    } catch (const engine::checkpoint::CheckpointError& error) {
      out.push_back(error.what());
    }
    return out;
  });
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_EQ(errors[rank].size(), 2u) << "rank " << rank;
    EXPECT_NE(errors[rank][0].find("[rank " + std::to_string(rank) +
                                   "] rank 0 could not save the checkpoint"),
              std::string::npos)
        << errors[rank][0];
    EXPECT_NE(errors[rank][1].find("checkpoint " + corrupt + ": not a dist-engine checkpoint"),
              std::string::npos);
  }
}

}  // namespace
