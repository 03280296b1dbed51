#include "engine/model/wrappers/zero_data_parallel.h"

#include <string>
#include <utility>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/model/named_parameter.h"
#include "engine/model/wrappers/bucket_plan.h"

namespace engine::model {
namespace {

constexpr const char* kZeroWrapper = "MMZeroDataParallel";

const ZeroOptions& checked(const ZeroOptions& options) {
  auto fail = [](const std::string& what) {
    throw dist::InvalidArgument(
        dist::on_rank(dist::get_rank(), std::string(kZeroWrapper) + ": " + what));
  };
  if (options.stage != 1 && options.stage != 2) {
    fail("stage must be 1 or 2, got " + std::to_string(options.stage) +
         "; stage 3 is MMFullyShardedDataParallel with FULL_SHARD");
  }
  if (options.reduce_bucket_size <= 0) {
    fail("reduce_bucket_size must be positive, got " + std::to_string(options.reduce_bucket_size));
  }
  return options;
}

FSDPOptions base_options(const ZeroOptions& options) {
  FSDPOptions base;
  base.sharding_strategy = ShardingStrategy::kShardGradOp;
  base.sync_module_states = options.sync_module_states;
  base.process_group = options.process_group;
  return base;
}

// Buckets of parameters in reverse registration order, listed last bucket
// first: the base reduces units in the reverse of their order.
std::vector<sharding::UnitPlan> bucket_units(torch::nn::Module& module, int64_t bucket_size) {
  std::vector<NamedParameter> params;
  std::vector<BucketInput> inputs;
  for (auto& param : unique_named_parameters(module)) {
    inputs.push_back({param.tensor.numel(), std::string(param.tensor.dtype().name()) + " " +
                                                param.tensor.device().str()});
    params.push_back(std::move(param));
  }
  auto buckets = plan_buckets(inputs, reverse_order(params.size()), bucket_size, bucket_size);
  std::vector<sharding::UnitPlan> units;
  for (size_t b = buckets.size(); b-- > 0;) {
    sharding::UnitPlan unit{"bucket " + std::to_string(b), nullptr, {}};
    for (size_t index : buckets[b]) unit.params.push_back(params[index]);
    units.push_back(std::move(unit));
  }
  return units;
}

}  // namespace

MMZeroDataParallel::MMZeroDataParallel(std::shared_ptr<BaseModel> module, ZeroOptions options)
    : MMFullyShardedDataParallel(
          std::move(module), base_options(checked(options)),
          UnitScheme{[bucket_size = options.reduce_bucket_size](torch::nn::Module& root) {
                       return bucket_units(root, bucket_size);
                     },
                     sharding::Residency::kWhole, options.stage == 2 && options.overlap_comm,
                     /*no_sync_inside_accumulation=*/options.stage == 1}),
      zero_options_(std::move(options)) {}

}  // namespace engine::model
