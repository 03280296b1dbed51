#include "testing/strategy/resume_cases.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/checkpoint/state_dict.h"
#include "engine/dist/dist.h"
#include "engine/model/batch_norm.h"
#include "engine/runner/runner.h"
#include "engine/strategy/fsdp_strategy.h"
#include "engine/strategy/zero_strategy.h"
#include "examples/classifier.h"
#include "testing/io/failing_file_system.h"

namespace resume_cases {
namespace {

using engine::registry::Json;

// Training data that stops the rank (throws Killed) when iteration
// `crash_at` asks for its batch, and keeps the indices it served.
class CrashingData : public examples::Blobs {
 public:
  CrashingData(const examples::BlobsOptions& options, std::optional<int64_t> crash_at,
               bool process_noise)
      : Blobs(options, 3), crash_at_(crash_at), process_noise_(process_noise) {}
  engine::model::TensorDict batch(const std::vector<int64_t>& indices,
                                  at::Generator* rng) const override {
    if (rng && crash_at_ && ++served_ == *crash_at_) throw Killed();
    if (rng) batches_.push_back(at::tensor(indices, at::kLong));
    engine::model::TensorDict out = Blobs::batch(indices, rng);
    if (rng && process_noise_) {  // from the default generator, as most C++ code draws
      at::Tensor& inputs = out.at("inputs");
      inputs = inputs + 0.1 * at::randn(inputs.sizes(), inputs.options());
    }
    return out;
  }
  const std::vector<at::Tensor>& batches() const { return batches_; }

 private:
  std::optional<int64_t> crash_at_;
  bool process_noise_;
  mutable int64_t served_ = 0;
  mutable std::vector<at::Tensor> batches_;
};

// The process's file system, but the `crash_at`-th rename (a snapshot's
// commit) throws Killed instead.
class CrashingCommits : public failing_fs::FailingFileSystem {
 public:
  explicit CrashingCommits(std::optional<int64_t> crash_at) : crash_at_(crash_at) {}
  int rename(const std::string& from, const std::string& to) override {
    if (crash_at_ && ++renames_ == *crash_at_) throw Killed();
    return FailingFileSystem::rename(from, to);
  }

 private:
  std::optional<int64_t> crash_at_;
  int64_t renames_ = 0;
};

}  // namespace

rc::Gen<Case> resume_case(int world_size, const std::string& strategy) {
  return rc::gen::exec([world_size, strategy] {
    Case c;
    c.strategy = strategy;
    c.world_size = world_size;
    c.max_iters = *rc::gen::inRange<int64_t>(3, 16);
    c.accumulate = *rc::gen::inRange<int64_t>(1, 3);
    if (strategy == "ZeroStrategy") c.zero_stage = *rc::gen::inRange(1, 4);
    if (strategy == "DDPStrategy" && *rc::gen::arbitrary<bool>()) {
      c.comm_hook = {{"type", "PowerSGD"},
                     {"matrix_approximation_rank", *rc::gen::inRange(1, 3)},
                     {"start_powerSGD_iter", *rc::gen::inRange(2, 5)},
                     {"min_compression_rate", 1.0},
                     {"use_error_feedback", *rc::gen::arbitrary<bool>()},
                     {"warm_start", *rc::gen::arbitrary<bool>()}};
    }
    if (strategy == "DDPStrategy") c.zero_redundancy = *rc::gen::arbitrary<bool>();
    if (*rc::gen::arbitrary<bool>()) {
      c.loss_scale = {{"init_scale", std::ldexp(1.0, *rc::gen::inRange(118, 128))},
                      {"growth_interval", *rc::gen::inRange(1, 4)}};
    }
    c.stop_at = *rc::gen::inRange<int64_t>(1, c.max_iters);
    c.milestone = *rc::gen::inRange<int64_t>(1, c.max_iters + 1);
    return c;
  });
}

std::string folder(const std::string& dir, int node) {
  return (std::filesystem::path(dir) / ("node_" + std::to_string(node))).string();
}

Outcome train(const Case& c, int64_t checkpoint_interval, std::optional<int64_t> crash_at,
              const std::string& dir, std::optional<std::string> resume_from,
              const Snapshotting& snapshots) {
  engine::strategy::EnvOptions env;
  env.seed = kSeed;
  env.diff_rank_seed = true;  // every rank's generator differs: each must come back
  env.seed_process_generator = c.process_generator;
  std::shared_ptr<engine::strategy::BaseStrategy> strategy;
  auto init = at::make_generator<at::CPUGeneratorImpl>(5);
  auto model = std::make_shared<examples::Classifier>(examples::ClassifierOptions{6, 10, 3}, init);
  if (c.strategy == "ZeroStrategy") {
    engine::model::convert_sync_batchnorm(*model);
    engine::strategy::ZeroStrategyOptions options;
    options.stage = c.zero_stage;
    options.reduce_bucket_size = 50;
    options.overlap_comm = c.milestone % 2 == 0;
    strategy = std::make_shared<engine::strategy::ZeroStrategy>(env, options);
  } else if (c.strategy == "FSDPStrategy") {
    engine::model::convert_sync_batchnorm(*model);  // DDPStrategy's sync_bn, by hand
    engine::strategy::FSDPStrategyOptions options;
    options.model_wrapper = {
        {"auto_wrap_policy", {{"type", "size_based_auto_wrap_policy"}, {"min_num_params", 20}}}};
    strategy = std::make_shared<engine::strategy::FSDPStrategy>(env, options);
  } else {
    Json wrapper{{"bucket_cap_mb", 0.0005}};
    if (!c.comm_hook.is_null()) wrapper["comm_hook"] = c.comm_hook;
    strategy = std::make_shared<engine::strategy::DDPStrategy>(
        env, engine::strategy::DDPStrategyOptions{wrapper, "torch"});
  }
  strategy->setup_env();
  examples::BlobsOptions data;
  data.size = c.dataset_size;
  data.features = 6;
  data.classes = 3;
  data.jitter = 0.3;  // augmentation drawn from the ranks' generators
  auto train_data = std::make_shared<CrashingData>(data, crash_at, c.process_generator);
  engine::runner::RunnerOptions options;
  options.max_iters = c.max_iters;
  options.batch_size = kBatchSize;
  options.checkpoint_interval = checkpoint_interval;
  options.work_dir = dir;
  CrashingCommits commits(snapshots.crash_at_commit);
  options.snapshot_interval = snapshots.interval;
  options.snapshot_overlap = snapshots.overlap;
  if (snapshots.interval > 0) {
    const int rank = engine::dist::get_rank();
    options.snapshot_dir = folder(snapshots.dir, rank * snapshots.nodes / c.world_size);
  }
  options.snapshot_file_system = &commits;
  options.resume_from = std::move(resume_from);
  options.quiet = true;
  Json optimizer = {{"type", "SGD"}, {"lr", 0.1}, {"momentum", 0.9}};
  if (c.zero_redundancy) {
    optimizer["optimizer_type"] = "SGD";
    optimizer["type"] = "ZeroRedundancyOptimizer";
  }
  Json optim = {{"optimizer", optimizer}, {"accumulative_counts", c.accumulate}};
  if (!c.loss_scale.is_null()) {
    optim["type"] = "AmpOptimWrapper";
    optim["dtype"] = "bfloat16";
    optim["loss_scale"] = c.loss_scale;
  }
  const Json scheduler = {{"type", "MultiStepLR"}, {"milestones", {c.milestone}}, {"gamma", 0.5}};
  engine::runner::Runner runner(strategy, model, optim, scheduler, train_data, train_data,
                                examples::accuracy, options);
  runner.train();
  Outcome out;
  for (const auto& entry : engine::checkpoint::state_dict(strategy->module())) {
    out.state[entry.first] = entry.second.clone();
  }
  if (auto* fsdp = dynamic_cast<engine::model::MMFullyShardedDataParallel*>(
          strategy->prepared().model.get())) {
    for (const auto& entry : fsdp->full_parameters()) out.state[entry.first] = entry.second;
  }
  out.batches = train_data->batches();
  out.next_draw = at::rand({4}, strategy->generator(), at::kDouble);
  if (c.process_generator) out.next_draw = at::cat({out.next_draw, at::rand({4}, at::kDouble)});
  return out;
}

c10::IValue to_ivalue(const Outcome& outcome) {
  return c10::ivalue::Tuple::create({engine::checkpoint::to_dict(outcome.state), outcome.next_draw,
                                     c10::List<at::Tensor>(outcome.batches)});
}

void from_ivalue(const c10::IValue& value, Outcome& out) {
  const auto& elements = value.toTupleRef().elements();
  out.state = engine::checkpoint::from_dict(elements[0].toGenericDict());
  out.next_draw = elements[1].toTensor();
  out.batches = elements[2].toTensorVector();
}

}  // namespace resume_cases
