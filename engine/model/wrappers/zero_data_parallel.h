#pragma once

#include <cstdint>
#include <memory>

#include "engine/model/wrappers/fully_sharded_data_parallel.h"

namespace engine::model {

// The largest reduce_bucket_size a config may give: every whole number up
// to it is exact in a JSON number.
constexpr int64_t kMaxReduceBucketSize = int64_t{1} << 53;

struct ZeroOptions {
  // 1: optimizer state sharded; 2: gradients too. (Stage 3 is
  // MMFullyShardedDataParallel's FULL_SHARD.) Anything else is
  // InvalidArgument.
  int stage = 2;
  // DeepSpeed's reduce_bucket_size, in elements: gradients are
  // reduce-scattered in buckets of at least this many elements (a bucket
  // closes at the parameter that reaches it), parameters taken in reverse
  // registration order, the order a backward produces them.
  int64_t reduce_bucket_size = 500'000'000;
  // Stage 2: a bucket's reduce-scatter starts as soon as its gradients are
  // ready, overlapping the rest of backward (DeepSpeed's overlap_comm);
  // false: all buckets start when backward ends. Stage 1 has no backward
  // hooks and ignores it, as DeepSpeed does.
  bool overlap_comm = false;
  // Broadcast parameters and buffers from the group's first rank first
  // (DeepSpeed always does).
  bool sync_module_states = true;
  dist::GroupPtr process_group;  // nullptr: the default group
};

// ZeRO stages 1 and 2 (DeepSpeed's ZeRO optimizer) for a model of any
// structure. Parameters stay whole on every rank between optimizer steps,
// as under DDP; the optimizer state is sharded: OptimWrapper::step points
// every parameter at this rank's shard (dim 0, FSDP2's layout, padded),
// steps the shards, and all-gathers them back, one bucket at a time. So the
// optimizer sees one tensor per original parameter, names, options and
// frozen parameters kept; build it after the wrapper over parameters(), and
// step it through OptimWrapper (a bare optimizer.step() would meet whole
// parameters with sharded gradients, and LibTorch's Adagrad, which makes its
// state at construction, cannot step shards).
//
// Gradients are reduce-scattered in buckets into sharded gradients (.grad
// has the shard's shape between backward and step), averaged over the
// group. The stages differ in when:
//   stage 1  once per optimizer step: inside an accumulation group the
//            whole gradients accumulate locally (train_step runs the
//            intermediate backwards under no_sync) and are reduced when
//            the group's last backward ends
//   stage 2  every backward, accumulating into the sharded gradients; with
//            overlap_comm during backward
// Per rank, in fp32 with Adam: DDP holds 16 bytes per parameter; stage 1
// 4 + 4 + 8/N between steps (whole parameters, whole gradients inside an
// accumulation group; this implementation frees them once reduced, so
// 4 + 12/N after a step); stage 2 4 + 12/N. Checkpoints: FSDPStrategy's
// sharded format, through local_shards(), loadable at any world size and by
// MMFullyShardedDataParallel.
class MMZeroDataParallel : public MMFullyShardedDataParallel {
 public:
  // train_step: stage 1 keeps an accumulation group's intermediate
  // backwards local (no_sync); stage 2 communicates on every backward.
  MMZeroDataParallel(std::shared_ptr<BaseModel> module, ZeroOptions options = {});

  const ZeroOptions& zero_options() const { return zero_options_; }

 private:
  ZeroOptions zero_options_;
};

}  // namespace engine::model
