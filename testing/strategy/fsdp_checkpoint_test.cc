// FSDPStrategy's and ZeroStrategy's checkpoints: a sharded save loads at
// any world size, under any sharding strategy or ZeRO stage, with the saved
// parameters and optimizer state, exactly, and training goes on as the
// saving run does; a full save loads into DDP and single-device
// strategies; damaged directories are refused on every rank; a model whose
// initialisation was skipped trains only once a checkpoint has filled it.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/zeros_like.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/file.h"
#include "engine/dist/dist.h"
#include "engine/dist/errors.h"
#include "engine/io/file_system.h"
#include "engine/model/batch_norm.h"
#include "engine/model/init/deferred.h"
#include "engine/optim/optimizer_state.h"
#include "engine/registry/registry.h"
#include "engine/strategy/fsdp_strategy.h"
#include "examples/classifier.h"
#include "sim/world.h"
#include "testing/harness.h"
#include "testing/io/failing_file_system.h"
#include "testing/property.h"

namespace {

using engine::checkpoint::CheckpointError;
using engine::registry::Json;
using engine::strategy::BaseStrategy;

constexpr int64_t kGlobalBatch = 12;  // split evenly over 1, 2, 3 or 4 ranks

struct RunSetup {
  // A ShardingStrategy's name (FSDPStrategy), or ZERO_1, ZERO_2, ZERO_3
  // (ZeroStrategy with that stage).
  std::string sharding = "FULL_SHARD";
  int hybrid_shard_size = 0;
  std::string optimizer = "SGD";
  int64_t hidden = 5;
  std::string state_dict_type = "sharded";
  Json mixed_precision;  // FSDP's, as mmengine writes it; null: none
  // FSDPStrategy's skip_init_weights, the model deferred before prepare().
  bool skip_init_weights = false;
};

std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "fsdp_checkpoint" / name;
  harness::once_for_all_processes([&] {
    engine::io::remove_all(dir);
    std::filesystem::create_directories(dir.parent_path());
  });
  return dir.string();
}

std::shared_ptr<BaseStrategy> make_strategy(std::string type, const RunSetup& setup) {
  const bool zero = type == "FSDPStrategy" && setup.sharding.rfind("ZERO_", 0) == 0;
  if (zero) type = "ZeroStrategy";
  Json config = {{"type", type}, {"seed", 3}, {"seed_process_generator", false}};
  if (zero) {
    config["stage"] = setup.sharding.back() - '0';
    config["reduce_bucket_size"] = 20;  // several buckets
    config["overlap_comm"] = setup.hidden % 2 == 0;
    config["state_dict_type"] = setup.state_dict_type;
  } else if (type == "FSDPStrategy") {
    Json wrapper = {
        {"sharding_strategy", setup.sharding},
        {"auto_wrap_policy", {{"type", "size_based_auto_wrap_policy"}, {"min_num_params", 1}}}};
    if (setup.hybrid_shard_size) wrapper["hybrid_shard_size"] = setup.hybrid_shard_size;
    if (!setup.mixed_precision.is_null()) wrapper["mixed_precision"] = setup.mixed_precision;
    config["model_wrapper"] = wrapper;
    config["state_dict_type"] = setup.state_dict_type;
    if (setup.skip_init_weights) config["skip_init_weights"] = true;
  }
  if (type == "DDPStrategy") config["sync_bn"] = "torch";
  return engine::strategy::strategies().build(config);
}

// The classifier with synchronised BatchNorm, so that its buffers agree on
// every rank (FSDP, as PyTorch's, leaves buffers to the model).
const engine::strategy::Prepared& prepare(BaseStrategy& strategy, const RunSetup& setup,
                                          uint64_t init_seed) {
  auto rng = at::make_generator<at::CPUGeneratorImpl>(init_seed);
  auto model =
      std::make_shared<examples::Classifier>(examples::ClassifierOptions{3, setup.hidden, 2}, rng);
  engine::model::convert_sync_batchnorm(*model);
  if (setup.skip_init_weights) engine::model::init::defer(*model);
  Json optimizer = {{"type", setup.optimizer}, {"lr", 0.05}};
  if (setup.optimizer == "SGD") optimizer["momentum"] = 0.9;
  return strategy.prepare(model, {{"optimizer", optimizer}});
}

const examples::Blobs& data() {
  static const examples::Blobs blobs(
      [] {
        examples::BlobsOptions options;
        options.size = 10 * kGlobalBatch;
        options.features = 3;
        options.classes = 2;
        return options;
      }(),
      7);
  return blobs;
}

// Step `step`'s global batch, this rank's even share of it.
engine::model::TensorDict batch(int64_t step, int rank, int world_size) {
  const int64_t share = kGlobalBatch / world_size;
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < share; ++i) indices.push_back(step * kGlobalBatch + rank * share + i);
  return data().batch(indices, nullptr);
}

void train(const engine::strategy::Prepared& parts, int64_t from, int64_t to, int world_size) {
  for (int64_t step = from; step < to; ++step) {
    parts.model->train_step(batch(step, engine::dist::get_rank(), world_size),
                            *parts.optim_wrapper);
  }
}

at::Tensor logits(const engine::strategy::Prepared& parts) {
  parts.model->eval();
  at::Tensor out = parts.model->forward(batch(9, 0, 1), engine::model::ForwardMode::kTensor)
                       .at("logits")
                       .detach()
                       .clone();
  parts.model->train();
  return out;
}

std::map<std::string, at::Tensor> full_parameters(const engine::strategy::Prepared& parts) {
  return dynamic_cast<engine::model::MMFullyShardedDataParallel&>(*parts.model).full_parameters();
}

bool same_value(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor()) return at::equal(a.toTensor(), b.toTensor());
  return a == b;
}

// Where two full checkpoints' parameters, buffers or optimizer state differ
// in any bit; "" when they hold the same.
std::string model_and_optimizer_difference(const std::string& a, const std::string& b) {
  const auto first = engine::checkpoint::load_file(a).toGenericDict();
  const auto second = engine::checkpoint::load_file(b).toGenericDict();
  const auto weights = second.at("state_dict").toGenericDict();
  for (const auto& item : first.at("state_dict").toGenericDict()) {
    if (!weights.contains(item.key()) ||
        !at::equal(item.value().toTensor(), weights.at(item.key()).toTensor())) {
      return "state_dict entry " + item.key().toStringRef();
    }
  }
  const auto optimizer = [](const c10::impl::GenericDict& content) {
    return engine::optim::from_state_dict(content.at("optimizer"), "the checkpoint");
  };
  const auto x = optimizer(first), y = optimizer(second);
  if (x.params.size() != y.params.size()) return "optimizer parameter count";
  for (size_t i = 0; i < x.params.size(); ++i) {
    if (x.params[i].size() != y.params[i].size()) {
      return "optimizer state size of parameter " + std::to_string(i);
    }
    for (const auto& item : x.params[i]) {
      if (!same_value(item.value(), y.params[i].at(item.key()))) {
        return "optimizer " + item.key().toStringRef() + " of parameter " + std::to_string(i);
      }
    }
  }
  return "";
}

// HYBRID_SHARD shards over pairs of ranks; an odd world shards fully.
RunSetup for_world(RunSetup setup, int world_size) {
  const bool hybrid = setup.sharding == "HYBRID_SHARD";
  const bool pairs = hybrid && world_size % 2 == 0;
  setup.sharding = pairs ? "HYBRID_SHARD" : hybrid ? "FULL_SHARD" : setup.sharding;
  setup.hybrid_shard_size = pairs ? 2 : 0;
  return setup;
}

rc::Gen<std::string> sharding_kind() {
  return rc::gen::element<std::string>("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                       "ZERO_1", "ZERO_2", "ZERO_3");
}

HARNESS_PROP(FsdpCheckpointProperty, ASavedRunLoadsAtAnyWorldSizeAndTrainsOn, ()) {
  const int saving_world = *rc::gen::inRange(1, harness::max_world_size(4) + 1);
  const int loading_world = *rc::gen::inRange(1, harness::max_world_size(4) + 1);
  RunSetup drawn;
  drawn.sharding = *sharding_kind();
  drawn.optimizer = *rc::gen::element<std::string>("SGD", "Adam");
  drawn.hidden = *rc::gen::inRange<int64_t>(1, 8);  // rows fewer than ranks, or not divisible
  RunSetup loading_drawn = drawn;
  loading_drawn.sharding = *sharding_kind();
  const RunSetup saving = for_world(drawn, saving_world);
  const RunSetup loading = for_world(loading_drawn, loading_world);
  const int64_t steps = *rc::gen::inRange<int64_t>(1, 4);
  RC_TAG(saving_world, loading_world, saving.sharding, loading.sharding, saving.optimizer);
  const std::string sharded = fresh_dir("sharded");
  const std::string saved_full = fresh_dir("saved.pth");
  const std::string loaded_full = fresh_dir("loaded.pth");

  const auto trained_on = harness::collect_ranks<std::vector<at::Tensor>>(saving_world, [&](int) {
    auto strategy = make_strategy("FSDPStrategy", saving);
    const auto& parts = prepare(*strategy, saving, 1);
    train(parts, 0, steps, saving_world);
    strategy->save_checkpoint(sharded, {steps, 0});
    RunSetup full = saving;
    full.state_dict_type = "full";
    auto writer = make_strategy("FSDPStrategy", full);
    prepare(*writer, full, 1);
    writer->resume(sharded);
    writer->save_checkpoint(saved_full, {steps, 0});
    train(parts, steps, steps + 1, saving_world);
    std::vector<at::Tensor> out;
    for (const auto& item : full_parameters(parts)) out.push_back(item.second);
    return out;
  });
  // At the loading world size: one step from the sharded checkpoint, and one
  // from the saving run's full checkpoint.
  const auto resumed = harness::collect_ranks<std::vector<at::Tensor>>(loading_world, [&](int) {
    std::vector<at::Tensor> out;
    for (const std::string& path : {sharded, saved_full}) {
      RunSetup full = loading;
      full.state_dict_type = "full";
      auto strategy = make_strategy("FSDPStrategy", full);
      const auto& parts = prepare(*strategy, loading, 2);  // other initial values
      RC_ASSERT(strategy->resume(path).progress.iter == steps);
      if (path == sharded) strategy->save_checkpoint(loaded_full, {steps, 0});
      train(parts, steps, steps + 1, loading_world);
      for (const auto& item : full_parameters(parts)) out.push_back(item.second);
    }
    return out;
  });
  RC_ASSERT(model_and_optimizer_difference(saved_full, loaded_full) == "");
  const size_t count = trained_on[0].size();
  for (int rank = 0; rank < loading_world; ++rank) {
    RC_ASSERT(resumed[rank].size() == 2 * count);
    for (size_t i = 0; i < count; ++i) {
      RC_ASSERT(at::equal(resumed[rank][i], resumed[0][i]));
      RC_ASSERT(at::equal(resumed[rank][i], resumed[rank][count + i]));
      // Another world size sums the same gradients in another order: float32
      // rounding. Adam is left out: the bias of the Linear before BatchNorm
      // has an analytically zero gradient, and Adam turns its rounding noise
      // into steps of +-lr.
      if (drawn.optimizer == "SGD") {
        RC_ASSERT(at::allclose(resumed[rank][i], trained_on[0][i], 1e-4, 1e-6));
      }
    }
  }
}

TEST(FsdpCheckpointTest, AFullCheckpointLoadsIntoDdpAndSingleDeviceWithTheSameOutputs) {
  RunSetup setup;
  setup.optimizer = "Adam";
  setup.state_dict_type = "full";
  const std::string path = fresh_dir("full.pth");
  const std::string from_ddp = fresh_dir("from_ddp.pth");
  const int world = harness::max_world_size(3);
  const auto fsdp = harness::collect_ranks<at::Tensor>(world, [&](int) {
    auto strategy = make_strategy("FSDPStrategy", setup);
    const auto& parts = prepare(*strategy, setup, 1);
    train(parts, 0, 2, world);
    strategy->save_checkpoint(path, {2, 0});
    return logits(parts);
  });
  const auto ddp = harness::collect_ranks<at::Tensor>(2, [&](int rank) {
    auto strategy = make_strategy("DDPStrategy", setup);
    const auto& parts = prepare(*strategy, setup, 2);
    EXPECT_EQ(strategy->resume(path).progress.iter, 2);
    strategy->save_checkpoint(from_ddp, {2, 0});
    return logits(parts);
  });
  const auto single = harness::collect_ranks<at::Tensor>(1, [&](int) {
    auto strategy = make_strategy("SingleDeviceStrategy", setup);
    const auto& parts = prepare(*strategy, setup, 2);
    strategy->load_checkpoint(path);
    return logits(parts);
  });
  EXPECT_TRUE(at::equal(fsdp[0], ddp[0]));
  EXPECT_TRUE(at::equal(fsdp[0], ddp[1]));
  EXPECT_TRUE(at::equal(fsdp[0], single[0]));
  EXPECT_TRUE(at::equal(fsdp[0], fsdp[world - 1]));
  EXPECT_EQ(model_and_optimizer_difference(path, from_ddp), "");
}

// Mixed precision changes what a rank computes in, not what it keeps: a
// full checkpoint holds the parameters and buffers in the model's own
// float32, and a run without mixed precision loads it.
TEST(FsdpCheckpointTest, AMixedPrecisionCheckpointHoldsTheModelsOwnDtypes) {
  RunSetup setup;
  setup.state_dict_type = "full";
  setup.mixed_precision = {{"param_dtype", "bfloat16"}, {"buffer_dtype", "bfloat16"}};
  const std::string path = fresh_dir("mixed.pth");
  harness::run_ranks(2, [&](int) {
    auto strategy = make_strategy("FSDPStrategy", setup);
    train(prepare(*strategy, setup, 1), 0, 2, 2);
    strategy->save_checkpoint(path, {2, 0});
  });
  const auto state = engine::checkpoint::load_file(path).toGenericDict().at("state_dict");
  int running_stats = 0;
  for (const auto& item : state.toGenericDict()) {
    const at::Tensor& value = item.value().toTensor();
    if (!at::isFloatingType(value.scalar_type())) continue;
    EXPECT_EQ(value.scalar_type(), at::kFloat) << item.key().toStringRef();
    running_stats += item.key().toStringRef().find("running_") != std::string::npos;
  }
  EXPECT_GT(running_stats, 0);
  harness::run_ranks(2, [&](int) {
    auto strategy = make_strategy("FSDPStrategy", RunSetup{});
    prepare(*strategy, RunSetup{}, 2);
    EXPECT_EQ(strategy->resume(path).progress.iter, 2);
  });
}

// Each rank's error, or "" when the load went through.
std::vector<std::string> resume_errors(const std::string& dir, int world_size) {
  return harness::collect_ranks<std::string>(world_size, [&](int) {
    auto strategy = make_strategy("FSDPStrategy", RunSetup{});
    prepare(*strategy, RunSetup{}, 2);
    try {
      strategy->resume(dir);
    } catch (const CheckpointError& error) {
      return std::string(error.what());
    }
    return std::string();
  });
}

void save_two_ranks(const std::string& dir) {
  harness::run_ranks(2, [&](int) {
    auto strategy = make_strategy("FSDPStrategy", RunSetup{});
    const auto& parts = prepare(*strategy, RunSetup{}, 1);
    train(parts, 0, 1, 2);
    strategy->save_checkpoint(dir, {1, 0});
  });
}

void expect_every_rank_says(const std::vector<std::string>& errors, const std::string& what) {
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    EXPECT_NE(errors[rank].find(what), std::string::npos)
        << "rank " << rank << ": " << errors[rank];
  }
}

TEST(FsdpCheckpointTest, DamagedShardedCheckpointsAreRefusedOnEveryRank) {
  const std::string dir = fresh_dir("damaged");
  const std::string other = fresh_dir("other");
  save_two_ranks(other);

  const std::string rank_file = dir + "/rank_00001.ckpt";
  save_two_ranks(dir);
  harness::once_for_all_processes([&] { std::filesystem::remove(rank_file); });
  expect_every_rank_says(resume_errors(dir, 2), "lacks rank_00001.ckpt");

  save_two_ranks(dir);
  harness::once_for_all_processes([&] {
    std::filesystem::copy_file(other + "/rank_00001.ckpt", rank_file,
                               std::filesystem::copy_options::overwrite_existing);
  });
  expect_every_rank_says(resume_errors(dir, 2), "belongs to another save");

  save_two_ranks(dir);
  harness::once_for_all_processes(
      [&] { std::filesystem::resize_file(rank_file, std::filesystem::file_size(rank_file) / 2); });
  expect_every_rank_says(resume_errors(dir, harness::max_world_size(3)), "rank_00001.ckpt");

  save_two_ranks(dir);
  harness::once_for_all_processes([&] { std::filesystem::remove(dir + "/COMPLETE"); });
  expect_every_rank_says(resume_errors(dir, 2), "has no COMPLETE marker");
}

// index.ckpt rewritten (with a valid envelope) by `damage`; every rank's
// error on resuming from it.
std::vector<std::string> errors_with_index(
    const std::string& dir, const std::function<void(c10::impl::GenericDict&)>& damage) {
  save_two_ranks(dir);
  harness::once_for_all_processes([&] {
    const std::string index = dir + "/index.ckpt";
    auto content = engine::checkpoint::load_file(index).toGenericDict();
    damage(content);
    engine::checkpoint::save_file(index, content);
  });
  return resume_errors(dir, 2);
}

// Content that passes the file's checks but is not what a save writes: a
// typed error on every rank that says so, never a crash (a chunk count of 0
// divided by zero).
TEST(FsdpCheckpointTest, AnIndexOfAnotherLayoutIsRefusedOnEveryRank) {
  const std::string dir = fresh_dir("index");
  auto first_tensor = [](c10::impl::GenericDict& index) {
    return (*index.at("tensors").toGenericDict().begin()).value().toGenericDict();
  };
  for (int64_t shards : {int64_t{0}, int64_t{-3}, int64_t{1} << 40}) {
    expect_every_rank_says(errors_with_index(dir,
                                             [&](c10::impl::GenericDict& index) {
                                               first_tensor(index).insert_or_assign("shards",
                                                                                    shards);
                                             }),
                           "chunks, but 2 ranks saved it");
  }
  const std::string layout = "is not of the layout save_checkpoint writes";
  expect_every_rank_says(
      errors_with_index(
          dir, [](c10::impl::GenericDict& index) { EXPECT_EQ(index.erase("world_size"), 1u); }),
      layout);
  expect_every_rank_says(errors_with_index(dir,
                                           [](c10::impl::GenericDict& index) {
                                             index.insert_or_assign("tensors", int64_t{3});
                                           }),
                         layout);
  expect_every_rank_says(errors_with_index(dir,
                                           [&](c10::impl::GenericDict& index) {
                                             first_tensor(index).insert_or_assign(
                                                 "sizes", std::string("four"));
                                           }),
                         layout);
}

// A save at iteration `iter` of a `world_size`-rank run into `path`, each
// rank writing through the disk `disk_of` gives it; every rank's error ("" when
// its save returned) and the steps its disk ran.
struct SaveOutcome {
  std::string error;
  int64_t steps = 0;
};
c10::IValue to_ivalue(const SaveOutcome& outcome) {
  return c10::ivalue::Tuple::create({outcome.error, outcome.steps});
}
void from_ivalue(const c10::IValue& value, SaveOutcome& out) {
  const auto& elements = value.toTupleRef().elements();
  out = {elements[0].toStringRef(), elements[1].toInt()};
}

std::vector<SaveOutcome> save_on(
    const std::string& path, const RunSetup& setup, int world_size, int64_t iter,
    const std::function<void(int rank, failing_fs::FailingFileSystem&)>& plant) {
  return harness::collect_ranks<SaveOutcome>(world_size, [&](int rank) {
    failing_fs::FailingFileSystem disk;
    plant(rank, disk);
    auto strategy = make_strategy("FSDPStrategy", setup);
    strategy->set_file_system(disk);
    train(prepare(*strategy, setup, 1), 0, iter, world_size);
    SaveOutcome out;
    try {
      strategy->save_checkpoint(path, {iter, 0});
    } catch (const CheckpointError& error) {
      out.error = error.what();
    }
    out.steps = disk.steps();
    return out;
  });
}

// Every rank's "iter K" on resuming from `path`, or its error.
std::vector<std::string> resumed_from(const std::string& path, const RunSetup& setup,
                                      int world_size) {
  return harness::collect_ranks<std::string>(world_size, [&](int) {
    auto strategy = make_strategy("FSDPStrategy", setup);
    prepare(*strategy, setup, 2);
    try {
      return "iter " + std::to_string(strategy->resume(path).progress.iter);
    } catch (const CheckpointError& error) {
      return std::string(error.what());
    }
  });
}

// One rank's disk fails (full) at one step of a save, for every rank and
// every step of its writes, in a sharded and a full save: every rank throws
// the same CheckpointError naming that rank, and what is on disk is the
// previous save whole, or a directory that no load takes for finished. Only
// a full save's file whose last step (the folder's sync) failed may already
// hold the new save, whole.
TEST(FsdpCheckpointTest, AWriteThatFailsOnAnyRankAtAnyStepLeavesNoFinishedSave) {
  const int world = harness::max_world_size(3);
  const auto no_fault = [](int, failing_fs::FailingFileSystem&) {};
  for (const std::string type : {"sharded", "full"}) {
    RunSetup setup;
    setup.state_dict_type = type;
    const std::string path = fresh_dir("failing_" + type);
    const auto counted = save_on(path, setup, world, 2, no_fault);
    int planted = 0;
    for (int failing = 0; failing < world; ++failing) {
      for (int64_t step = 0; step < counted[failing].steps; ++step, ++planted) {
        SCOPED_TRACE(type + ": rank " + std::to_string(failing) + " failing at step " +
                     std::to_string(step));
        for (const auto& outcome : save_on(path, setup, world, 1, no_fault)) {
          ASSERT_EQ(outcome.error, "");
        }
        const auto faulty = save_on(path, setup, world, 2, [&](int rank, auto& disk) {
          if (rank == failing) disk.fail_at(static_cast<int>(step), ENOSPC);
        });
        const std::string shared = faulty[0].error.substr(faulty[0].error.find(']') + 1);
        EXPECT_NE(shared.find("rank " + std::to_string(failing) + " could not save"),
                  std::string::npos)
            << shared;
        EXPECT_NE(shared.find(std::strerror(ENOSPC)), std::string::npos) << shared;
        EXPECT_EQ(shared.find("\n"), std::string::npos) << "more than one rank named";
        for (int rank = 0; rank < world; ++rank) {
          EXPECT_EQ(faulty[rank].error, "[rank " + std::to_string(rank) + "]" + shared);
        }
        const auto resumed = resumed_from(path, setup, world);
        const bool last_step = step == counted[failing].steps - 1;
        for (int rank = 0; rank < world; ++rank) {
          if (type == "full" && last_step) {
            EXPECT_EQ(resumed[rank], resumed[0]);
            EXPECT_TRUE(resumed[0] == "iter 1" || resumed[0] == "iter 2") << resumed[0];
          } else if (type == "full" || (failing == 0 && step == 0)) {
            EXPECT_EQ(resumed[rank], "iter 1");  // the previous save, untouched
          } else {
            EXPECT_NE(resumed[rank].find("has no COMPLETE marker"), std::string::npos)
                << resumed[rank];
          }
        }
      }
    }
    std::cout << type << " save: " << planted << " faults planted\n";
    EXPECT_GT(planted, world);
  }
}

bool died(const std::exception_ptr& error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const failing_fs::Crashed&) {
    return true;
  } catch (...) {
  }
  return false;
}

// A rank that dies at any step of a sharded save: the others are told, and no
// load takes the directory for a finished save unless it is the new one,
// whole.
TEST(FsdpCheckpointTest, ARankThatDiesAtAnyStepOfASaveLeavesNoUnfinishedSaveLookingFinished) {
  if (harness::process_mode()) GTEST_SKIP() << "a rank's death is the simulator's to plant";
  const int world = 3;
  const RunSetup setup;
  const std::string path = fresh_dir("dying");
  const auto counted = save_on(path, setup, world, 2, [](int, failing_fs::FailingFileSystem&) {});
  int planted = 0;
  for (int dying = 0; dying < world; ++dying) {
    for (int64_t step = 0; step < counted[dying].steps; ++step, ++planted) {
      SCOPED_TRACE("rank " + std::to_string(dying) + " dying at step " + std::to_string(step));
      save_on(path, setup, world, 1, [](int, failing_fs::FailingFileSystem&) {});
      const auto outcome = sim::World(world, harness::test_options()).run_all([&](int rank) {
        failing_fs::FailingFileSystem disk;
        if (rank == dying) disk.crash_at(static_cast<int>(step));
        auto strategy = make_strategy("FSDPStrategy", setup);
        strategy->set_file_system(disk);
        train(prepare(*strategy, setup, 1), 0, 2, world);
        strategy->save_checkpoint(path, {2, 0});
      });
      for (int rank = 0; rank < world; ++rank) {
        const std::string message = sim::error_message(outcome.errors[rank]);
        if (rank == dying) {
          EXPECT_TRUE(died(outcome.errors[rank])) << message;
        } else {
          EXPECT_STREQ(sim::error_kind(outcome.errors[rank]), "PeerFailure") << message;
        }
      }
      const auto resumed = resumed_from(path, setup, world);
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_EQ(resumed[rank].substr(resumed[rank].find(']') + 1),
                  resumed[0].substr(resumed[0].find(']') + 1));
      }
      if (dying == 0 && step == 0) {
        EXPECT_EQ(resumed[0], "iter 1");  // died before any write: the previous save
      } else if (resumed[0] != "iter 2") {
        EXPECT_NE(resumed[0].find("has no COMPLETE marker"), std::string::npos) << resumed[0];
      }
    }
  }
  std::cout << planted << " deaths planted\n";
}

// Inside an accumulation group every rank's gradients so far are part of the
// state (the resume property shows they come back exactly); another world
// size cannot take them.
TEST(FsdpCheckpointTest, ASaveInsideAnAccumulationGroupResumesOnlyAtItsWorldSize) {
  const std::string dir = fresh_dir("inside_group");
  const Json optim = {{"optimizer", {{"type", "SGD"}, {"lr", 0.1}}}, {"accumulative_counts", 2}};
  auto model = [] {
    auto rng = at::make_generator<at::CPUGeneratorImpl>(1);
    return std::make_shared<examples::Classifier>(examples::ClassifierOptions{3, 5, 2}, rng);
  };
  harness::run_ranks(2, [&](int) {
    auto strategy = make_strategy("FSDPStrategy", RunSetup{});
    const auto& parts = strategy->prepare(model(), optim);
    train(parts, 0, 1, 2);
    strategy->save_checkpoint(dir, {1, 0});
  });
  const auto errors = harness::collect_ranks<std::string>(1, [&](int) {
    auto strategy = make_strategy("FSDPStrategy", RunSetup{});
    strategy->prepare(model(), optim);
    try {
      strategy->resume(dir);
    } catch (const CheckpointError& error) {
      return std::string(error.what());
    }
    return std::string();
  });
  expect_every_rank_says(errors, "was saved inside a gradient accumulation group by 2 ranks");
}

std::vector<at::Tensor> values_of(const std::map<std::string, at::Tensor>& named) {
  std::vector<at::Tensor> out;
  for (const auto& item : named) out.push_back(item.second);
  return out;
}

// mmengine's skip_init_weights: the deferred model is left as zeros, a
// train step before a checkpoint fills it is refused on every rank, and once
// resumed it trains as the run that saved the checkpoint.
TEST(FsdpCheckpointTest, SkippedInitialisationTrainsOnlyOnceACheckpointFillsIt) {
  RunSetup setup;
  const std::string path = fresh_dir("skip_init.pth");
  const int world = harness::max_world_size(3);
  const auto saving = harness::collect_ranks<std::vector<at::Tensor>>(world, [&](int) {
    auto strategy = make_strategy("FSDPStrategy", setup);
    const auto& parts = prepare(*strategy, setup, 1);
    train(parts, 0, 2, world);
    strategy->save_checkpoint(path, {2, 0});
    train(parts, 2, 4, world);
    return values_of(full_parameters(parts));
  });
  RunSetup skipping = setup;
  skipping.skip_init_weights = true;
  const auto resumed = harness::collect_ranks<std::vector<at::Tensor>>(world, [&](int) {
    auto strategy = make_strategy("FSDPStrategy", skipping);
    const auto& parts = prepare(*strategy, skipping, 2);
    for (const auto& [name, value] : full_parameters(parts)) {
      EXPECT_TRUE(at::equal(value, at::zeros_like(value))) << name << " before loading";
    }
    try {
      train(parts, 2, 3, world);
      ADD_FAILURE() << "trained on weights nothing initialised";
    } catch (const engine::dist::InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("skip_init_weights left \""), std::string::npos)
          << error.what();
    }
    EXPECT_EQ(strategy->resume(path).progress.iter, 2);
    train(parts, 2, 4, world);
    return values_of(full_parameters(parts));
  });
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(resumed[rank].size(), saving[rank].size());
    for (size_t i = 0; i < saving[rank].size(); ++i) {
      EXPECT_TRUE(at::equal(resumed[rank][i], saving[rank][i])) << "rank " << rank << ", " << i;
    }
  }
}

TEST(FsdpCheckpointTest, SkipInitWeightsMistakesAreNamed) {
  auto config_error = [](const Json& config) -> std::string {
    try {
      engine::strategy::strategies().build(config);
    } catch (const engine::registry::ConfigError& error) {
      return error.what();
    }
    return "built";
  };
  EXPECT_NE(config_error({{"type", "FSDPStrategy"}, {"skip_init_weights", "yes"}})
                .find("skip_init_weights"),
            std::string::npos);
  EXPECT_NE(config_error({{"type", "FSDPStrategy"},
                          {"skip_init_weights", true},
                          {"model_wrapper", {{"type", "MMZeroDataParallel"}}}})
                .find("needs the MMFullyShardedDataParallel model_wrapper"),
            std::string::npos);
  harness::run_ranks(2, [&](int) {
    auto strategy = engine::strategy::strategies().build(
        {{"type", "FSDPStrategy"},
         {"skip_init_weights", true},
         {"model_wrapper", {{"param_init_fn", "normal_init"}}}});
    strategy->setup_env();
    auto rng = at::make_generator<at::CPUGeneratorImpl>(1);
    auto model = std::make_shared<examples::Classifier>(examples::ClassifierOptions{3, 4, 2}, rng);
    try {
      strategy->prepare(model, {{"optimizer", {{"type", "SGD"}, {"lr", 0.1}}}});
      ADD_FAILURE() << "skip_init_weights and param_init_fn both taken";
    } catch (const engine::dist::InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("give one of the two"), std::string::npos)
          << error.what();
    }
  });
}

TEST(FsdpCheckpointTest, AnUnknownStateDictTypeIsNamed) {
  try {
    engine::strategy::strategies().build({{"type", "FSDPStrategy"}, {"state_dict_type", "half"}});
    FAIL() << "built";
  } catch (const engine::registry::ConfigError& error) {
    EXPECT_NE(std::string(error.what())
                  .find("unknown state_dict_type \"half\"; known: sharded or local, full"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
