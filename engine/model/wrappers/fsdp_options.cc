#include "engine/model/wrappers/fsdp_options.h"

#include <algorithm>
#include <cctype>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"

namespace engine::model {
namespace {

// PyTorch's enum names, in any case; InvalidArgument lists them.
template <typename Enum>
Enum parse_enum(const std::string& what, const std::string& name,
                const std::vector<std::pair<std::string, Enum>>& known) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  std::string listed;
  for (const auto& [spelling, value] : known) {
    if (upper == spelling) return value;
    listed += (listed.empty() ? "" : ", ") + spelling;
  }
  throw dist::InvalidArgument(
      dist::on_rank(dist::get_rank(), "unknown " + what + " \"" + name + "\"; known: " + listed));
}

}  // namespace

ShardingStrategy parse_sharding_strategy(const std::string& name) {
  return parse_enum<ShardingStrategy>("sharding_strategy", name,
                                      {{"FULL_SHARD", ShardingStrategy::kFullShard},
                                       {"SHARD_GRAD_OP", ShardingStrategy::kShardGradOp},
                                       {"NO_SHARD", ShardingStrategy::kNoShard},
                                       {"HYBRID_SHARD", ShardingStrategy::kHybridShard}});
}

BackwardPrefetch parse_backward_prefetch(const std::string& name) {
  return parse_enum<BackwardPrefetch>("backward_prefetch", name,
                                      {{"BACKWARD_PRE", BackwardPrefetch::kBackwardPre},
                                       {"BACKWARD_POST", BackwardPrefetch::kBackwardPost},
                                       {"NONE", BackwardPrefetch::kNone}});
}

}  // namespace engine::model
