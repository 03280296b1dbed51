#pragma once

#include <ATen/core/Tensor.h>
#include <rapidcheck.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/checkpoint/state_dict.h"
#include "engine/registry/config.h"

// The exact-resume property's training runs (DDPStrategy or FSDPStrategy,
// classifier with SyncBatchNorm, SGD with momentum, MultiStepLR, gradient
// accumulation, every rank's generator in use), shared by its suite and by
// tools/simcheck.
namespace resume_cases {

struct Case {
  // "DDPStrategy", "FSDPStrategy" (FULL_SHARD) or "ZeroStrategy" (stage
  // zero_stage); the last two with sharded checkpoints.
  std::string strategy = "DDPStrategy";
  int zero_stage = 2;
  int world_size = 1;
  int64_t max_iters = 3;
  int64_t stop_at = 1;     // the iteration after which the stopped run dies
  int64_t accumulate = 1;  // accumulative_counts
  int64_t milestone = 1;   // MultiStepLR's
  int64_t dataset_size = 40;
  // DDPStrategy's communication hook, as its model_wrapper's "comm_hook"
  // (null: none).
  engine::registry::Json comm_hook;
  // AmpOptimWrapper's "loss_scale" (bfloat16 autocast); null: a plain
  // OptimWrapper.
  engine::registry::Json loss_scale;
  // DDPStrategy's SGD inside a ZeroRedundancyOptimizer.
  bool zero_redundancy = false;
  // Also seed, draw from and check LibTorch's default CPU generator: only
  // where every rank has a process of its own (simulated ranks share it).
  bool process_generator = false;
};

// Cases for `world_size` ranks: 3-15 iterations, a stop anywhere before the
// end (inside an accumulation group too), accumulation 1-2, the milestone
// anywhere; under DDPStrategy, half of them with PowerSGD (rank 1-2, from
// iteration 2-4, with and without error feedback and warm start) and,
// independently, half with ZeroRedundancyOptimizer; half of
// them with AmpOptimWrapper in bfloat16, scaling dynamically from a scale
// near float32's limit (2^118-2^127, growing after 1-3 steps), so that
// steps overflow, skip and back off by where the scale has moved.
rc::Gen<Case> resume_case(int world_size, const std::string& strategy = "DDPStrategy");

// Every run's batch size per rank, and the seed every rank's sampler shares.
constexpr int64_t kBatchSize = 4;
constexpr int64_t kSeed = 11;

// Everything that must come out bit-identical: the module's parameters and
// buffers, and the next random draws of the rank's generator (and of the
// process's default generator with process_generator). Also the training
// samples the rank was served, one tensor of indices per iteration.
struct Outcome {
  engine::checkpoint::StateDict state;
  at::Tensor next_draw;
  std::vector<at::Tensor> batches;
};

// How an Outcome travels between processes (harness::collect_ranks).
c10::IValue to_ivalue(const Outcome& outcome);
void from_ivalue(const c10::IValue& value, Outcome& out);

// Thrown on the rank whose data loader reaches `crash_at` (as a job killed
// there would stop).
constexpr const char* kKilled = "killed by the case's planted stop";
struct Killed : std::runtime_error {
  Killed() : std::runtime_error(kKilled) {}
};

// In-memory snapshots (RunnerOptions::snapshot_interval) into `dir`, the
// commit of the `crash_at_commit`-th (1-based) throwing Killed on rank 0.
// The ranks are `nodes` nodes of consecutive ranks (as even as they divide),
// each with its own folder, folder(dir, node).
struct Snapshotting {
  int64_t interval = 0;
  std::string dir;
  std::optional<int64_t> crash_at_commit;
  int nodes = 1;
  bool overlap = false;  // RunnerOptions::snapshot_overlap
};
std::string folder(const std::string& dir, int node);

// One rank's run to c.max_iters, from `resume_from` if given ("auto": the
// newest checkpoint in `dir` or snapshot), checkpointing every
// `checkpoint_interval` iterations (0: never), throwing Killed when
// iteration `crash_at` (1-based) asks for its batch.
Outcome train(const Case& c, int64_t checkpoint_interval, std::optional<int64_t> crash_at,
              const std::string& dir, std::optional<std::string> resume_from,
              const Snapshotting& snapshots = {});

}  // namespace resume_cases
