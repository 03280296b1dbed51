#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>
#include <string>
#include <vector>

namespace engine::dist {

// Memory that the processes of one machine map by name (POSIX shared memory
// through ATen's MapAllocator): the segments behind node-shared buffers and
// the mpi backend's staging window. A mapping stays valid until its DataPtr
// goes, whatever became of the name.

// Whether node-shared memory may be used: DIST_ENGINE_NODE_SHARED is not "0".
bool node_shared_wanted();

// This rank's new segment of `bytes`, and its name while this object lives:
// unlinked when it goes, however the allocation ends, so that nothing stays
// in /dev/shm. The pages are reserved up front, so that a tmpfs without room
// fails here rather than with SIGBUS at the first store.
struct OwnSegment {
  std::string name;
  at::DataPtr mapping;  // null when it could not be made

  explicit OwnSegment(int64_t bytes);
  ~OwnSegment();
  OwnSegment(const OwnSegment&) = delete;
  OwnSegment& operator=(const OwnSegment&) = delete;
};

// Every rank's segment mapped here, by rank: `names` by rank ("" where a
// rank made none), this rank's own given as `own`. Empty when one could not
// be made or opened on this rank.
std::vector<at::DataPtr> map_all_segments(const std::vector<std::string>& names, int rank,
                                          at::DataPtr own, int64_t bytes);

}  // namespace engine::dist
