#pragma once

#include <string>
#include <utility>

#include "engine/dist/group.h"

namespace engine::model {

// HYBRID_SHARD's groups: shard groups of `shard_size` consecutive ranks
// (0: get_local_size(), a node) and replica groups of the ranks with the
// same place in theirs. Collective over `group`, which must be the default
// group: every rank makes every group, in one order. Returns this rank's
// pair; the replica group is nullptr when it would hold one rank. A group
// other than the default one, or a world size that `shard_size` does not
// divide, is InvalidArgument naming `wrapper` and what to change.
std::pair<dist::GroupPtr, dist::GroupPtr> hybrid_groups(const dist::GroupPtr& group, int shard_size,
                                                        const std::string& wrapper);

}  // namespace engine::model
