#include "engine/snapshot/snapshots.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/checkpoint/all_ranks.h"
#include "engine/checkpoint/file.h"
#include "engine/dist/dist.h"
#include "engine/io/atomic_file.h"
#include "engine/io/file_system.h"

namespace engine::snapshot {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMarker = "COMMITTED";
constexpr const char* kMagic = "dist-engine snapshot";

[[noreturn]] void refuse(const std::string& marker, const std::string& what) {
  throw checkpoint::CheckpointError(dist::on_rank(
      dist::get_rank(), "snapshot marker " + marker + " " + what +
                            "; remove its folder to resume from the newest checkpoint instead"));
}

}  // namespace

Snapshots::Snapshots(std::string folder, io::FileSystem& fs)
    : folder_(std::move(folder)), fs_(fs) {}

std::string Snapshots::entry(int64_t iter) const {
  return (fs::path(folder_) / ("snapshot_iter_" + std::to_string(iter) + ".pth")).string();
}

std::optional<Snapshot> Snapshots::newest() const {
  const std::string marker = (fs::path(folder_) / kMarker).string();
  std::error_code error;
  if (!fs::exists(marker, error)) return std::nullopt;
  std::ifstream in(marker);
  std::string magic;
  int64_t iter = -1;
  std::getline(in, magic);
  in >> iter;
  if (!in || magic != kMagic || iter < 0) refuse(marker, "is not a snapshot marker");
  Snapshot out{iter, entry(iter)};
  if (!fs::exists(out.path, error)) refuse(marker, "names " + out.path + ", which is gone");
  return out;
}

void Snapshots::take(strategy::BaseStrategy& strategy, const strategy::TrainProgress& progress) {
  const std::string path = entry(progress.iter);
  // A snapshot of this iteration that a killed attempt wrote and never
  // committed goes first, so that no file of it mixes with the new one.
  checkpoint::on_first_rank_for_all([&] { io::remove_all(path); },
                                    "clear the uncommitted snapshot " + path);
  strategy.save_checkpoint(path, progress);
  checkpoint::on_first_rank_for_all(
      [&] { commit(progress.iter); },
      "commit the snapshot of iteration " + std::to_string(progress.iter));
}

void Snapshots::commit(int64_t iter) {
  const std::string content = std::string(kMagic) + "\n" + std::to_string(iter) + "\n";
  io::write_atomically((fs::path(folder_) / kMarker).string(), {content}, fs_);
  const fs::path kept = fs::path(entry(iter)).filename();
  for (const auto& item : fs::directory_iterator(folder_)) {
    const fs::path name = item.path().filename();
    if (name != kMarker && name != kept) io::remove_all(item.path());
  }
}

std::optional<std::string> folder_from_environment() {
  const char* folder = std::getenv("DIST_ENGINE_SNAPSHOT_DIR");
  if (folder == nullptr || *folder == '\0') return std::nullopt;
  return std::string(folder);
}

}  // namespace engine::snapshot
