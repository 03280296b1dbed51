#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/checkpoint/state_dict.h"
#include "engine/dist/dist.h"
#include "engine/runner/runner.h"
#include "engine/strategy/strategy.h"
#include "examples/classifier.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace {

using engine::registry::Json;

struct Case {
  int world_size;
  int64_t max_iters;
  int64_t stop_at;
  int64_t accumulate;
  int64_t milestone;
};

// Everything that must come out bit-identical: the module's parameters and
// buffers, and the next random draw of the rank's generator.
struct Outcome {
  engine::checkpoint::StateDict state;
  at::Tensor next_draw;
};

// Training data that "crashes" the rank (throws) when iteration `crash_at`
// (1-based) asks for its batch: the run is killed, as a job would be.
class CrashingData : public examples::Blobs {
 public:
  CrashingData(const examples::BlobsOptions& options, std::optional<int64_t> crash_at)
      : Blobs(options, 3), crash_at_(crash_at) {}
  engine::model::TensorDict batch(const std::vector<int64_t>& indices,
                                  at::Generator* rng) const override {
    if (rng && crash_at_ && ++served_ == *crash_at_) throw Killed();
    return Blobs::batch(indices, rng);
  }
  struct Killed : std::runtime_error {
    Killed() : std::runtime_error("killed") {}
  };

 private:
  std::optional<int64_t> crash_at_;
  mutable int64_t served_ = 0;
};

std::string work_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "resume" / name;
  std::filesystem::remove_all(dir);
  return dir.string();
}

// One rank's run to c.max_iters, from `resume_from` if given, checkpointing
// every `checkpoint_interval` iterations, killed at iteration `crash_at`.
Outcome run(const Case& c, int64_t checkpoint_interval, std::optional<int64_t> crash_at,
            const std::string& dir, std::optional<std::string> resume_from) {
  engine::strategy::EnvOptions env;
  env.seed = 11;
  env.diff_rank_seed = true;  // every rank's generator differs: each must come back
  env.seed_process_generator = false;
  auto strategy = std::make_shared<engine::strategy::DDPStrategy>(
      env, engine::strategy::DDPStrategyOptions{Json{{"bucket_cap_mb", 0.0005}}, "torch"});
  strategy->setup_env();
  auto init = at::make_generator<at::CPUGeneratorImpl>(5);
  auto model = std::make_shared<examples::Classifier>(examples::ClassifierOptions{6, 10, 3}, init);
  examples::BlobsOptions data;
  data.size = 40;
  data.features = 6;
  data.classes = 3;
  data.jitter = 0.3;  // augmentation drawn from the ranks' generators
  auto train = std::make_shared<CrashingData>(data, crash_at);
  engine::runner::RunnerOptions options;
  options.max_iters = c.max_iters;
  options.batch_size = 4;
  options.checkpoint_interval = checkpoint_interval;
  options.work_dir = dir;
  options.resume_from = std::move(resume_from);
  options.quiet = true;
  const Json optim = {{"optimizer", {{"type", "SGD"}, {"lr", 0.1}, {"momentum", 0.9}}},
                      {"accumulative_counts", c.accumulate}};
  const Json scheduler = {{"type", "MultiStepLR"}, {"milestones", {c.milestone}}, {"gamma", 0.5}};
  engine::runner::Runner runner(strategy, model, optim, scheduler, train, train, examples::accuracy,
                                options);
  runner.train();
  Outcome out;
  for (const auto& entry : engine::checkpoint::state_dict(strategy->module())) {
    out.state[entry.first] = entry.second.clone();
  }
  out.next_draw = at::rand({4}, strategy->generator(), at::kDouble);
  return out;
}

HARNESS_PROP(ResumeProperty, AStoppedAndResumedRunEndsBitIdenticalToAnUninterruptedOne, ()) {
  Case c;
  c.world_size = *rc::gen::inRange(1, 5);
  c.max_iters = *rc::gen::inRange<int64_t>(3, 16);
  c.stop_at = *rc::gen::inRange<int64_t>(1, c.max_iters);
  c.accumulate = *rc::gen::inRange<int64_t>(1, 3);
  c.milestone = *rc::gen::inRange<int64_t>(1, c.max_iters + 1);
  RC_TAG(c.world_size);
  const auto straight_dir = work_dir("straight");
  const auto stopped_dir = work_dir("stopped");
  const auto straight = harness::collect_ranks<Outcome>(
      c.world_size, [&](int) { return run(c, 0, std::nullopt, straight_dir, std::nullopt); });
  try {
    harness::run_ranks(c.world_size,
                       [&](int) { run(c, c.stop_at, c.stop_at + 1, stopped_dir, std::nullopt); });
    RC_FAIL("the stopped run was not killed");
  } catch (const CrashingData::Killed&) {
  }
  const auto resumed = harness::collect_ranks<Outcome>(
      c.world_size, [&](int) { return run(c, 0, std::nullopt, stopped_dir, std::string("auto")); });
  for (int rank = 0; rank < c.world_size; ++rank) {
    for (const auto& entry : straight[rank].state) {
      RC_ASSERT(at::equal(entry.second, resumed[rank].state.at(entry.first)));
      RC_ASSERT(at::equal(entry.second, straight[0].state.at(entry.first)));
    }
    RC_ASSERT(at::equal(straight[rank].next_draw, resumed[rank].next_draw));
  }
}

}  // namespace
