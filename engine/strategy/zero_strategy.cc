#include "engine/strategy/zero_strategy.h"

#include <string>

#include "engine/dist/info.h"

namespace engine::strategy {
namespace {

FSDPStrategyOptions as_fsdp(const ZeroStrategyOptions& options) {
  auto fail = [](const std::string& what) {
    throw registry::ConfigError(dist::on_rank(dist::get_rank(), "ZeroStrategy: " + what));
  };
  if (options.stage < 1 || options.stage > 3) {
    fail("stage must be 1, 2 or 3, got " + std::to_string(options.stage) +
         " (stage 0 is DDPStrategy)");
  }
  if (options.reduce_bucket_size < 1) {
    fail("reduce_bucket_size must be positive, got " + std::to_string(options.reduce_bucket_size));
  }
  check_sync_bn(options.sync_bn, "ZeroStrategy");
  FSDPStrategyOptions fsdp;
  fsdp.state_dict_type = options.state_dict_type;
  fsdp.sync_bn = options.sync_bn;
  if (options.stage == 3) {
    fsdp.model_wrapper = {{"type", "MMFullyShardedDataParallel"},
                          {"sharding_strategy", "FULL_SHARD"},
                          {"sync_module_states", true}};
  } else {
    fsdp.model_wrapper = {{"type", "MMZeroDataParallel"},
                          {"stage", options.stage},
                          {"reduce_bucket_size", options.reduce_bucket_size},
                          {"overlap_comm", options.overlap_comm}};
  }
  return fsdp;
}

}  // namespace

ZeroStrategy::ZeroStrategy(EnvOptions env, const ZeroStrategyOptions& options)
    : FSDPStrategy(std::move(env), as_fsdp(options)) {}

}  // namespace engine::strategy
