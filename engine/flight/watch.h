#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

// A rank's side of its launcher's watchdog (engine-launch --stall-timeout),
// and what the launcher reads of it. The launcher gives each rank a folder,
// DIST_ENGINE_WATCH_DIR; in it, the rank
//   - counts its calls in progress_rank<R>: two 64-bit counters in a file it
//     maps, which its launcher reads while the rank is stuck in a call;
//   - writes its flight record to flight_rank<R>.json whenever a byte comes
//     through the FIFO dump_rank<R>: a thread of the rank's own waits on it,
//     so that a rank blocked in a call still answers.
// Nothing here blocks a call: counting is two relaxed stores to shared pages.
namespace engine::flight {

struct Progress {
  uint64_t begun = 0;  // calls started
  uint64_t ended = 0;  // calls ended, completed or failed
  bool in_a_call() const { return begun > ended; }
};

std::string progress_path(const std::string& dir, int rank);
std::string dump_request_path(const std::string& dir, int rank);
std::string record_path(const std::string& dir, int rank);  // as Recorder::dump writes it

// The launcher's side. read_progress: nullopt while the rank has not made
// its file. request_dump: false when no rank listens on the FIFO.
std::optional<Progress> read_progress(const std::string& path);
bool request_dump(const std::string& path);

// The rank's side: makes both files, and runs `dump` on a thread of its own
// whenever a request comes, until destroyed. Throws std::runtime_error
// naming the file it could not make.
class Watched {
 public:
  Watched(const std::string& dir, int rank, std::function<void()> dump);
  ~Watched();
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

  void begun();
  void ended();

 private:
  void answer_requests();

  std::string fifo_;
  std::function<void()> dump_;
  std::atomic<uint64_t>* counters_ = nullptr;  // begun, ended: in the mapped file
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace engine::flight
