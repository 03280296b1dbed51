#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace engine::dist::shm {

// Memory that the processes of one machine map by name (POSIX shared memory
// through ATen's MapAllocator): the segments behind node-shared buffers and
// the mpi backend's staging area. A mapping stays valid until its DataPtr
// goes, whatever became of the name.

// What a group's ranks make their segments with, whatever carries them.
struct SegmentCollectives {
  // Every rank's `mine` (kSegmentNameBytes bytes), end to end in rank order.
  std::function<std::vector<char>(const std::vector<char>& mine)> all_gather_names;
  // Whether `mine` is true on every rank.
  std::function<bool(bool mine)> all_true;
};

constexpr size_t kSegmentNameBytes = 64;

// Collective over the `ranks` ranks that `collectives` reach (this one is
// `rank`): each rank makes a segment of `bytes` and maps every other rank's.
// Returns them by rank, as mapped here, when every rank could map every
// segment (they share a machine, /dev/shm has room, DIST_ENGINE_NODE_SHARED
// is not "0" on any rank); empty on every rank otherwise. The pages are
// reserved up front, so that a tmpfs without room fails here rather than
// with SIGBUS at the first store, and no name stays in /dev/shm once this
// returns, however it returns.
std::vector<at::DataPtr> map_segments_of_every_rank(int64_t bytes, int rank, int ranks,
                                                    const SegmentCollectives& collectives);

}  // namespace engine::dist::shm
