#include "engine/model/wrappers/hybrid_groups.h"

#include <vector>

#include "engine/dist/errors.h"
#include "engine/dist/group.h"
#include "engine/dist/info.h"

namespace engine::model {

std::pair<dist::GroupPtr, dist::GroupPtr> hybrid_groups(const dist::GroupPtr& group, int shard_size,
                                                        const std::string& wrapper) {
  const int rank = group->my_global_rank();
  if (group != dist::get_default_group()) {
    throw dist::InvalidArgument(
        dist::on_rank(rank, wrapper + ": HYBRID_SHARD builds its shard and replica groups from "
                                      "the default group; leave process_group unset"));
  }
  const int world = group->size();
  const int size = shard_size > 0 ? shard_size : dist::get_local_size();
  if (size <= 0 || world % size != 0) {
    throw dist::InvalidArgument(dist::on_rank(
        rank, wrapper + ": HYBRID_SHARD needs the world size (" + std::to_string(world) +
                  ") to be a multiple of the shard group size (" + std::to_string(size) +
                  "); set hybrid_shard_size to a divisor of it"));
  }
  dist::GroupPtr shard, replica;
  for (int first = 0; first < world; first += size) {
    std::vector<int> ranks(size);
    for (int i = 0; i < size; ++i) ranks[i] = first + i;
    auto made = dist::new_group(ranks);
    if (made->is_member()) shard = made;
  }
  for (int place = 0; place < size; ++place) {
    std::vector<int> ranks;
    for (int r = place; r < world; r += size) ranks.push_back(r);
    auto made = dist::new_group(ranks);
    if (made->is_member()) replica = made;
  }
  return {shard, replica->size() > 1 ? replica : nullptr};
}

}  // namespace engine::model
