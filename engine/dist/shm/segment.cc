#include "engine/dist/shm/segment.h"

#include <ATen/MapAllocator.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>

namespace engine::dist::shm {
namespace {

std::string fresh_name() {
  std::random_device device;
  return "/dist-engine-" + std::to_string(getpid()) + "-" + std::to_string(device()) + "-" +
         std::to_string(device());
}

// Mapped from a descriptor opened here: MapAllocator would unlink the name
// when the creator unmaps it, and OwnSegment does it as soon as every rank
// has mapped it. Null when it fails.
at::DataPtr map_segment(const std::string& name, bool create, int64_t bytes) {
  const int fd = shm_open(name.c_str(), create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
  if (fd < 0) return at::DataPtr();
  if (create && posix_fallocate(fd, 0, bytes) != 0) {
    close(fd);
    return at::DataPtr();
  }
  size_t actual = 0;
  try {
    return at::MapAllocator::makeDataPtr(
        at::WITH_FD, name.c_str(), fd, at::ALLOCATOR_MAPPED_SHAREDMEM | at::ALLOCATOR_MAPPED_FROMFD,
        bytes, &actual);
  } catch (const c10::Error&) {
    return at::DataPtr();
  }
}

bool node_shared_wanted() {
  const char* value = std::getenv("DIST_ENGINE_NODE_SHARED");
  return value == nullptr || std::string(value) != "0";
}

// This rank's new segment, and its name while this object lives: unlinked
// when it goes.
struct OwnSegment {
  std::string name;
  at::DataPtr mapping;  // null when it could not be made

  explicit OwnSegment(int64_t bytes)
      : name(fresh_name()), mapping(map_segment(name, /*create=*/true, bytes)) {}
  ~OwnSegment() { shm_unlink(name.c_str()); }
  OwnSegment(const OwnSegment&) = delete;
  OwnSegment& operator=(const OwnSegment&) = delete;
};

// Every rank's segment mapped here, by rank ("" where a rank made none;
// this rank's own given as `own`). Empty when one could not be opened.
std::vector<at::DataPtr> map_all(const std::vector<std::string>& names, int rank, at::DataPtr own,
                                 int64_t bytes) {
  std::vector<at::DataPtr> segments;
  for (size_t r = 0; r < names.size(); ++r) {
    if (static_cast<int>(r) == rank) {
      segments.push_back(std::move(own));
    } else if (!names[r].empty()) {
      segments.push_back(map_segment(names[r], /*create=*/false, bytes));
    }
    if (segments.size() != r + 1 || !segments.back()) return {};
  }
  return segments;
}

}  // namespace

std::vector<at::DataPtr> map_segments_of_every_rank(int64_t bytes, int rank, int ranks,
                                                    const SegmentCollectives& collectives) {
  std::optional<OwnSegment> own;
  if (node_shared_wanted()) own.emplace(bytes);
  const bool made = own && own->mapping;
  std::vector<char> mine(kSegmentNameBytes, 0);
  if (made) {
    std::memcpy(mine.data(), own->name.data(), std::min(own->name.size(), kSegmentNameBytes - 1));
  }
  const std::vector<char> all = collectives.all_gather_names(mine);
  std::vector<std::string> names;
  for (int r = 0; r < ranks; ++r) names.emplace_back(all.data() + r * kSegmentNameBytes);
  std::vector<at::DataPtr> segments =
      map_all(names, rank, made ? std::move(own->mapping) : at::DataPtr(), bytes);
  // Once every rank agrees, every rank has mapped what it could: `own`
  // unlinks the name on the way out.
  if (!collectives.all_true(!segments.empty())) return {};
  return segments;
}

}  // namespace engine::dist::shm
