#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/dist/group.h"
#include "engine/model/sharding/unit_schedule.h"
#include "engine/model/sharding/wrap_policy.h"

namespace engine::model {

// What MMFullyShardedDataParallel (fully_sharded_data_parallel.h) takes, as
// PyTorch's FullyShardedDataParallel names it, and the parsers of the names
// that configs spell (wrapper_registry.cc reads mmengine's keys).

// PyTorch's ShardingStrategy.
//   FULL_SHARD     parameters gathered for each unit's forward and again for
//                  its backward, freed after each (ZeRO stage 3)
//   SHARD_GRAD_OP  gathered for forward, kept until the end of backward
//   NO_SHARD       nothing sharded: gradients all-reduced (DDP)
//   HYBRID_SHARD   FULL_SHARD inside a shard group, replicated across
//                  shard groups: reduce-scatter in the shard group, then
//                  all-reduce of the shard across the replica group
enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard };

// "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD" (any case);
// anything else is InvalidArgument listing them.
ShardingStrategy parse_sharding_strategy(const std::string& name);

// PyTorch's MixedPrecision; unset fields keep the model's own dtypes.
//   param_dtype   the gathered parameters (the all-gather moves it) and the
//                 floating-point inputs of forward, val_step and test_step
//   reduce_dtype  the gradient reduce-scatter; unset follows param_dtype
//   buffer_dtype  floating-point buffers, cast once at construction and
//                 kept so (as FSDP1 does); buffer_state() gives them back
//                 in their own dtype for checkpoints
// The shards, the gradients the optimizer sees and so the optimizer state
// stay in the parameters' own dtype. ignored_modules are not cast.
struct MixedPrecision {
  std::optional<at::ScalarType> param_dtype;
  std::optional<at::ScalarType> reduce_dtype;
  std::optional<at::ScalarType> buffer_dtype;
};

// PyTorch's BackwardPrefetch (sharding/unit_schedule.h).
using sharding::BackwardPrefetch;

// "BACKWARD_PRE", "BACKWARD_POST", "NONE" (any case); anything else is
// InvalidArgument listing them.
BackwardPrefetch parse_backward_prefetch(const std::string& name);

struct FSDPOptions {
  ShardingStrategy sharding_strategy = ShardingStrategy::kFullShard;
  // Which modules become units (auto_wrap_policy, or fully_shard by code).
  sharding::WrapPolicy auto_wrap_policy;
  // Their parameters stay whole on every rank and their gradients are
  // averaged over the group, as DDP does.
  std::vector<const torch::nn::Module*> ignored_modules;
  // Broadcast parameters and buffers from the group's first rank before
  // sharding (PyTorch's default is false: each rank's shard then comes from
  // its own initial values).
  bool sync_module_states = false;
  dist::GroupPtr process_group;  // nullptr: the default group
  // HYBRID_SHARD: ranks per shard group, consecutive global ranks (a node);
  // 0: get_local_size(). The world size must be a multiple of it. Needs the
  // default group as process_group.
  int hybrid_shard_size = 0;
  MixedPrecision mixed_precision;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;
  // Issue the all-gather of the unit the previous forward ran next as a unit
  // begins its forward. The order is checked at every call, not assumed:
  // once this forward departs from the previous one it prefetches no more,
  // and a prefetched unit it did not run is freed.
  bool forward_prefetch = false;
  // Bound on prefetching (by which buffers exist, never by waiting): no
  // prefetch is issued while two units besides the root are gathered or
  // being gathered for use, so FULL_SHARD holds at most the root and two
  // units. Units SHARD_GRAD_OP keeps from their forward to the end of
  // backward are not counted: that strategy holds them all by design.
  bool limit_all_gathers = true;
  // Deferred initialisation (engine/model/init/deferred.h). Each module
  // holding deferred parameters or buffers of its own gets storage for them
  // (zeros, on device_id or else the CPU; the CPU under cpu_offload), then
  // param_init_fn(module) fills them; this goes unit by unit in forward
  // order, each unit sharded before the next is allocated, so the whole
  // model never exists on a rank. With
  // sync_module_states each unit is then broadcast from the group's first
  // rank, else each rank keeps its own values, as PyTorch does. Deferred
  // state and no param_init_fn is InvalidArgument, unless
  // skip_init_weights. Modules that are not deferred are left as they are
  // (PyTorch calls it on meta modules only).
  std::function<void(torch::nn::Module&)> param_init_fn;
  // mmengine's FSDPStrategy skip_init_weights, for weights a checkpoint will
  // fill: deferred state gets its storage (zeros) unit by unit as above and
  // nothing initialises it. Until load_local_shards (FSDPStrategy's
  // load_checkpoint or resume) fills the shards, train_step is
  // InvalidArgument naming a tensor left as zeros. With param_init_fn it is
  // InvalidArgument; a module with no deferred state is left as it is.
  bool skip_init_weights = false;
  // PyTorch's device_id: the module's parameters and buffers are moved there
  // before sharding, and deferred ones allocated there. Unset: they stay
  // where they are (deferred ones: the CPU). A CUDA device without CUDA is
  // InvalidArgument.
  std::optional<c10::Device> device_id;
  // PyTorch's CPUOffload(offload_params=True), with a GPU device_id: the
  // units' shards and the gradients the optimizer sees rest on the CPU, and
  // the optimizer steps there (its state too). Each gather copies the shard
  // to device_id first; the gathered parameters, their gradients, the
  // collectives and the buffers live there, and forward's inputs are moved
  // there; each reduced gradient shard is copied back. ignored_modules stay
  // on device_id; deferred parameters are allocated on the CPU. Without a
  // device_id or with the CPU as device_id everything is on the CPU already
  // and it changes nothing. Never run on a GPU here (none in this project's
  // CI): ci/gpu.sh's sharded suite is the test.
  bool cpu_offload = false;
};

}  // namespace engine::model
