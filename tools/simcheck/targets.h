#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

// What simcheck runs on every rank of a simulated world.
namespace simcheck {

// One rank's run of a target: returns a digest of its end state (parameters,
// metrics), so that a run can be compared bit for bit with a fault-free one.
using Target = std::function<std::string(int rank)>;

// "demo": examples::run_demo for `iters` iterations from the demo's config,
// with checkpoints in `work_dir` every third of the run; `resume`: from the
// latest one there ("auto"). "ddp": a DDP equivalence case drawn from `seed`,
// for `world_size` ranks (it has no checkpoints: `resume` starts it afresh).
// "strategy": the exact-resume property's DDPStrategy training, a case drawn
// from `seed`, checkpointing and taking snapshots in `work_dir`; `resume`:
// from the newest of them.
// "fsdp" and "zero": the same under FSDPStrategy (FULL_SHARD) and
// ZeroStrategy (stage drawn from `seed`), with sharded checkpoints.
// Throws std::invalid_argument for another name.
Target make_target(const std::string& name, uint64_t seed, int world_size, int64_t iters,
                   const std::string& work_dir, bool resume);

const std::vector<std::string>& target_names();

}  // namespace simcheck
