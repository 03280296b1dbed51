#pragma once

#include <cstdint>

#include "engine/strategy/fsdp_strategy.h"

namespace engine::strategy {

// DeepSpeed's zero_optimization keys that apply here.
struct ZeroStrategyOptions {
  int stage = 2;                             // 1, 2 or 3
  int64_t reduce_bucket_size = 500'000'000;  // elements
  bool overlap_comm = false;
  StateDictType state_dict_type = StateDictType::kSharded;
  // "torch": the engine's BatchNorm layers synchronised, as DDPStrategy's.
  std::optional<std::string> sync_bn;
};

// ZeRO as a strategy, in the place of mmengine's DeepSpeedStrategy: stage 1
// and 2 wrap the model in MMZeroDataParallel, stage 3 in
// MMFullyShardedDataParallel with FULL_SHARD (which is ZeRO stage 3).
// Checkpoints, loading and resume are FSDPStrategy's: a sharded checkpoint
// written under any stage loads under any other and under FSDPStrategy, at
// any world size. A stage outside 1-3 or a bucket size below 1 is a
// ConfigError.
class ZeroStrategy : public FSDPStrategy {
 public:
  ZeroStrategy(EnvOptions env, const ZeroStrategyOptions& options);
};

}  // namespace engine::strategy
