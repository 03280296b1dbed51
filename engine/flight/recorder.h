#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/dist/call.h"
#include "engine/flight/record.h"
#include "engine/flight/watch.h"

namespace engine::flight {

// Like PyTorch's NCCL flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE), for
// every backend: each rank keeps its last calls, written to a file when a
// collective fails with a timeout, a mismatch or a peer failure (if a folder
// is set) and on demand. tools/flight reads the files of all ranks.
struct RecorderOptions {
  // DIST_ENGINE_FLIGHT_SIZE: how many calls to keep; 0 turns recording off.
  size_t capacity = 2000;
  // DIST_ENGINE_FLIGHT_DIR: where a failure writes flight_rank<R>.json;
  // empty: failures write nothing.
  std::string dump_dir;
  // DIST_ENGINE_WATCH_DIR, which engine-launch --stall-timeout sets: where
  // the rank shows its launcher's watchdog its progress and answers its
  // requests for the flight record (watch.h); empty: not watched.
  std::string watch_dir;
};

// Reads the variables above; InvalidArgument names a malformed one.
RecorderOptions recorder_options_from_env();

// One rank's ring of entries. Thread-safe.
class Recorder {
 public:
  Recorder(int rank, int world_size, std::string backend, RecorderOptions options);
  ~Recorder();

  // Registers a group (its global ranks and its id, see Entry) for
  // begin().
  uint32_t add_group(std::vector<int> global_ranks, std::string id);
  // Stamps the start and writes the call's entry; returns its id. The ring
  // keeps calls in fixed-size slots (literals by pointer, the group by
  // index) written over the one they push out, so that recording allocates
  // nothing: a call of a few microseconds notices it.
  // `call`'s kind must be a literal (the ring keeps the pointer), its root
  // and peer global ranks; `seq` counts the calls of its kind on the group
  // that add_group() returned as `group`.
  uint64_t begin(const dist::Call& call, uint64_t seq, uint32_t group);
  // Stamps the end: completed when `error` is nullptr, else failed with its
  // message. A no-op when already ended or pushed out of the ring.
  void end(uint64_t id, std::exception_ptr error);

  Record snapshot(const std::string& reason) const;
  // Writes the snapshot to <dir>/flight_rank<R>.json, atomically; returns the path.
  std::string dump(const std::string& dir, const std::string& reason) const;
  // After a failed call: dumps to options().dump_dir when set and says where
  // on stderr. A dump that fails is reported there, never thrown over the
  // call's own error.
  void dump_after_failure(const std::string& reason) const;

  int rank() const { return rank_; }
  const RecorderOptions& options() const { return options_; }

 private:
  struct Group {
    std::vector<int> global_ranks;
    std::string id;
  };
  // A Entry as the ring keeps it.
  struct Slot {
    const char* kind = "";
    uint64_t seq = 0;
    uint32_t group = 0;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    c10::SmallVector<int64_t, 6> shape;
    int64_t bytes = 0;
    int root = -1;
    int peer = -1;
    const char* op = "";
    int64_t start_us = 0;
    int64_t end_us = 0;
    Entry::State state = Entry::State::kStarted;
    std::string error;

    // Every field, so that nothing of the call it replaces remains.
    void write(const dist::Call& call, uint64_t seq, uint32_t group, int64_t start);
    Entry entry(const Group& group) const;
  };

  Slot* find(uint64_t id);

  const int rank_;
  const int world_size_;
  const std::string backend_;
  const RecorderOptions options_;
  mutable std::mutex mutex_;
  std::vector<Group> groups_;
  std::vector<Slot> ring_;  // entry id sits at id % capacity
  uint64_t total_ = 0;
  std::unique_ptr<Watched> watched_;  // with options_.watch_dir
};

}  // namespace engine::flight
