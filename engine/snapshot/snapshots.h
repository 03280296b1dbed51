#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <optional>
#include <string>

#include "engine/io/file_system.h"
#include "engine/snapshot/folders.h"
#include "engine/strategy/strategy.h"

// The newest training state of a job, taken every few iterations into a
// folder in memory that outlives the ranks' processes, so that a restarted
// job loses at most those few iterations instead of everything since its
// last checkpoint. engine-launch owns such a folder for each job on each
// node (DIST_ENGINE_SNAPSHOT_DIR, in /dev/shm): it is kept across restarts
// and removed when the job ends.
//
// A folder holds
//   snapshot_iter_<N>.pth  the strategy's checkpoint after N iterations (a
//                          file, or a sharded checkpoint's folder), every
//                          file of it carrying its CRC-32
//                          (checkpoint/file.h), checked when it is read
//   COMMITTED              the iteration of the newest whole one and the
//                          list of its files with their sizes, written
//                          atomically once every rank's part is written
// A snapshot is written beside the committed one, which stays until the new
// one is committed: at most two exist, and a job killed in the middle of a
// snapshot keeps the previous one whole. It may be written in the background
// while training goes on (take_in_background), and is then committed by the
// next settle().
//
// Over several nodes each node has its own folder (folders.h says which
// ranks share one). Every file a node's ranks write is also copied to the
// next node's folder (the last node's to the first's) before any node
// commits, so that the nodes left after losing any one hold the whole
// snapshot between them; on resume, every folder first receives the files
// of it that it lacks. The first node commits first, then the others: a
// snapshot is committed once any folder's marker names it.
namespace engine::snapshot {

struct Snapshot {
  int64_t iter = 0;
  std::string path;  // what BaseStrategy::resume reads
};

class Snapshots {
 public:
  // `fs`: where the commit marker is written (tests crash it there).
  explicit Snapshots(std::string folder, io::FileSystem& fs = io::posix_file_system());

  // Collective: the newest snapshot committed in any folder, after the
  // files of it that a folder lacks were copied there; std::nullopt when
  // there is none, or when no folder holds one of its files (the nodes that
  // held them were lost; `note` is told which, and the run resumes from its
  // checkpoints instead). A CheckpointError on every rank, naming the
  // marker, when a marker cannot be read.
  std::optional<Snapshot> newest(const std::function<void(const std::string&)>& note =
                                     [](const std::string&) {}) const;

  // Collective: writes the training state after progress.iter iterations
  // with `strategy`'s save_checkpoint (over an uncommitted snapshot of the
  // same iteration, if any), copies each node's files to the next node,
  // then each folder's first rank commits it there and removes the older
  // snapshots. Every rank throws the same CheckpointError if a step failed;
  // if it failed before the first folder's commit, the committed snapshot is
  // still the previous one.
  // Settles a snapshot taken in the background first.
  void take(strategy::BaseStrategy& strategy, const strategy::TrainProgress& progress);

  // Collective: as take, but the files are written on a thread of each
  // rank's own (checkpoint::DeferredSaves) while the caller trains on: only
  // the strategy's collectives and a copy of the state (held in memory until
  // written) happen before it returns. The snapshot is committed by the next
  // settle(), so a job killed before then loses it: with one taken every k
  // iterations and settled after the next, a restart loses at most k + 1.
  // Settles a snapshot taken in the background first.
  void take_in_background(strategy::BaseStrategy& strategy,
                          const strategy::TrainProgress& progress);

  // Collective when a snapshot taken in the background is pending (every
  // rank has one pending or none): waits for its files, then copies and
  // commits it as take does. Every rank throws the same CheckpointError,
  // naming the ranks whose writes failed, and the committed snapshot is then
  // still the one before. Nothing happens when none is pending.
  void settle();

 private:
  std::string entry(int64_t iter) const;
  // Clears an uncommitted snapshot of `iter`; learns the layout.
  void begin(int64_t iter);
  // Copies the written files of `iter` between the folders and commits it.
  void publish(int64_t iter);
  void commit(int64_t iter, const Files& manifest);

  // A snapshot whose files are being written in the background.
  struct Pending {
    int64_t iter = 0;
    std::future<std::string> failure;  // "" once every file of it is written
  };
  std::optional<Pending> pending_;

  std::string folder_;
  io::FileSystem& fs_;
  // Which ranks share which folder, learnt from the first survey
  // (folders.h): it does not change in a job.
  struct Layout {
    bool leads = false;  // this rank writes its folder for the ranks that share it
    int folders = 1;
  };
  void learn_layout(const FolderView& view) const;
  mutable std::optional<Layout> layout_;
};

// DIST_ENGINE_SNAPSHOT_DIR when set and not empty.
std::optional<std::string> folder_from_environment();

}  // namespace engine::snapshot
