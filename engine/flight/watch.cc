#include "engine/flight/watch.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace engine::flight {
namespace {

constexpr size_t kProgressBytes = 2 * sizeof(uint64_t);

[[noreturn]] void cannot(const std::string& what, const std::string& path) {
  throw std::runtime_error("flight watch: cannot " + what + " " + path + ": " +
                           std::strerror(errno));
}

std::atomic<uint64_t>* map_counters(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) cannot("create", path);
  if (ftruncate(fd, kProgressBytes) != 0) {
    close(fd);
    cannot("size", path);
  }
  void* pages = mmap(nullptr, kProgressBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (pages == MAP_FAILED) cannot("map", path);
  return static_cast<std::atomic<uint64_t>*>(pages);
}

}  // namespace

std::string progress_path(const std::string& dir, int rank) {
  return dir + "/progress_rank" + std::to_string(rank);
}

std::string dump_request_path(const std::string& dir, int rank) {
  return dir + "/dump_rank" + std::to_string(rank);
}

std::string record_path(const std::string& dir, int rank) {
  return dir + "/flight_rank" + std::to_string(rank) + ".json";
}

std::optional<Progress> read_progress(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  uint64_t counters[2] = {};
  const bool whole = pread(fd, counters, sizeof(counters), 0) == sizeof(counters);
  close(fd);
  if (!whole) return std::nullopt;
  return Progress{counters[0], counters[1]};
}

bool request_dump(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;  // ENXIO: nobody reads it
  const char byte = 'd';
  const bool sent = write(fd, &byte, 1) == 1;
  close(fd);
  return sent;
}

Watched::Watched(const std::string& dir, int rank, std::function<void()> dump)
    : fifo_(dump_request_path(dir, rank)), dump_(std::move(dump)) {
  counters_ = map_counters(progress_path(dir, rank));
  unlink(fifo_.c_str());
  if (mkfifo(fifo_.c_str(), 0600) != 0) cannot("make the FIFO", fifo_);
  thread_ = std::thread([this] { answer_requests(); });
}

// Each open for reading waits for a writer: the launcher's request, or the
// destructor, which wakes the thread to stop.
void Watched::answer_requests() {
  for (;;) {
    const int fd = open(fifo_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == EINTR) continue;
    if (fd < 0) return;
    char byte = 0;
    while (read(fd, &byte, 1) == 1) {
      if (stopping_) break;
      dump_();
    }
    close(fd);
    if (stopping_) return;
  }
}

Watched::~Watched() {
  stopping_ = true;
  // Read and write: never blocks, and is the writer the thread's open waits
  // for, whether it opens before or after this; held until the thread is gone.
  const int fd = open(fifo_.c_str(), O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    const char byte = 'q';
    (void)!write(fd, &byte, 1);
  }
  thread_.join();
  if (fd >= 0) close(fd);
  unlink(fifo_.c_str());
  munmap(counters_, kProgressBytes);
}

void Watched::begun() { counters_[0].fetch_add(1, std::memory_order_relaxed); }

void Watched::ended() { counters_[1].fetch_add(1, std::memory_order_relaxed); }

}  // namespace engine::flight
