#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/io/file_system.h"
#include "engine/strategy/strategy.h"

// The newest training state of a job, taken every few iterations into a
// folder in memory that outlives the ranks' processes, so that a restarted
// job loses at most those few iterations instead of everything since its
// last checkpoint. engine-launch owns such a folder for each job on one node
// (DIST_ENGINE_SNAPSHOT_DIR, in /dev/shm): it is kept across restarts and
// removed when the job ends.
//
// The folder holds
//   snapshot_iter_<N>.pth  the strategy's checkpoint after N iterations (a
//                          file, or a sharded checkpoint's folder), every
//                          file of it carrying its CRC-32
//                          (checkpoint/file.h), checked when it is read
//   COMMITTED              the iteration of the newest whole one, written
//                          atomically once every rank's part is written
// A snapshot is written beside the committed one, which stays until the new
// one is committed: at most two exist, and a job killed in the middle of a
// snapshot keeps the previous one whole.
namespace engine::snapshot {

struct Snapshot {
  int64_t iter = 0;
  std::string path;  // what BaseStrategy::resume reads
};

class Snapshots {
 public:
  // `fs`: where the commit marker is written (tests crash it there).
  explicit Snapshots(std::string folder, io::FileSystem& fs = io::posix_file_system());

  // The committed snapshot, if any. No collectives. A CheckpointError
  // naming the marker when it cannot be read or names a snapshot that is
  // gone.
  std::optional<Snapshot> newest() const;

  // Collective: writes the training state after progress.iter iterations
  // with `strategy`'s save_checkpoint (over an uncommitted snapshot of the
  // same iteration, if any), then rank 0 commits it and removes the older
  // snapshots. Every rank throws the same CheckpointError if a
  // step failed; the committed snapshot is then still the previous one.
  void take(strategy::BaseStrategy& strategy, const strategy::TrainProgress& progress);

 private:
  std::string entry(int64_t iter) const;
  void commit(int64_t iter);

  std::string folder_;
  io::FileSystem& fs_;
};

// DIST_ENGINE_SNAPSHOT_DIR when set and not empty.
std::optional<std::string> folder_from_environment();

}  // namespace engine::snapshot
