#include "engine/dist/shared_segment.h"

#include <ATen/MapAllocator.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <random>

namespace engine::dist {
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

}  // namespace

bool node_shared_wanted() {
  const char* value = std::getenv("DIST_ENGINE_NODE_SHARED");
  return value == nullptr || std::string(value) != "0";
}

OwnSegment::OwnSegment(int64_t bytes)
    : name(fresh_name()), mapping(map_segment(name, /*create=*/true, bytes)) {}

OwnSegment::~OwnSegment() { shm_unlink(name.c_str()); }

std::vector<at::DataPtr> map_all_segments(const std::vector<std::string>& names, int rank,
                                          at::DataPtr own, int64_t bytes) {
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

}  // namespace engine::dist
