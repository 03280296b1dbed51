#include "engine/snapshot/snapshots.h"

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <utility>

#include "engine/checkpoint/all_ranks.h"
#include "engine/checkpoint/deferred_saves.h"
#include "engine/checkpoint/file.h"
#include "engine/dist/dist.h"
#include "engine/io/atomic_file.h"
#include "engine/io/file_system.h"

namespace engine::snapshot {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMarker = "COMMITTED";
constexpr const char* kMagic = "dist-engine snapshot";

std::string entry_name(int64_t iter) { return "snapshot_iter_" + std::to_string(iter) + ".pth"; }

// A marker's content: the magic line, the iteration, then one line per file
// of the snapshot, "<size> <path relative to the folder>".
std::string marker_content(int64_t iter, const Files& manifest) {
  std::string out = std::string(kMagic) + "\n" + std::to_string(iter) + "\n";
  for (const auto& [file, size] : manifest) out += std::to_string(size) + " " + file + "\n";
  return out;
}

// Files of `files` whose path is `name` or under it.
Files under(const Files& files, const std::string& name) {
  Files out;
  for (const auto& [file, size] : files) {
    if (file == name || file.rfind(name + "/", 0) == 0) out.emplace(file, size);
  }
  return out;
}

// Whether `file` names `entry` or a file under it the way a listing of the
// folder would: relative, normal, no "..".
bool in_entry(const std::string& file, const std::string& entry) {
  const fs::path path(file);
  if (path.empty() || path.is_absolute() || path.lexically_normal() != path) return false;
  for (const fs::path& part : path) {
    if (part == "..") return false;
  }
  return *path.begin() == entry;
}

struct Committed {
  int64_t iter = -1;
  Files manifest;
};

// `where` names the marker in the error.
Committed parse_marker(const std::string& content, const std::string& where) {
  std::istringstream in(content);
  std::string magic;
  Committed out;
  std::getline(in, magic);
  in >> out.iter;
  int64_t size = -1;
  std::string file;
  bool inside = true;
  while (in >> size && in.get() == ' ' && std::getline(in, file)) {
    inside &= size >= 0 && in_entry(file, entry_name(out.iter));
    out.manifest[file] = size;
  }
  if (!in.eof() || magic != kMagic || out.iter < 0 || out.manifest.empty() || !inside) {
    throw checkpoint::CheckpointError(dist::on_rank(
        dist::get_rank(), "snapshot marker " + where +
                              " is not a snapshot marker; remove its folder to resume from the "
                              "newest checkpoint instead"));
  }
  return out;
}

}  // namespace

Snapshots::Snapshots(std::string folder, io::FileSystem& fs)
    : folder_(std::move(folder)), fs_(fs) {}

std::string Snapshots::entry(int64_t iter) const {
  return (fs::path(folder_) / entry_name(iter)).string();
}

std::optional<Snapshot> Snapshots::newest(
    const std::function<void(const std::string&)>& note) const {
  const FolderView view = survey(folder_, kMarker);
  learn_layout(view);
  Committed newest;
  for (int k = 0; k < view.size(); ++k) {
    if (view.markers[k].empty()) continue;
    const std::string where = k == view.mine
                                  ? (fs::path(folder_) / kMarker).string()
                                  : "in the folder of rank " + std::to_string(view.leaders[k]);
    Committed committed = parse_marker(view.markers[k], where);
    if (committed.iter > newest.iter) newest = std::move(committed);
  }
  if (newest.iter < 0) return std::nullopt;
  std::vector<Copy> copies;
  std::string lost;
  for (const auto& [file, size] : newest.manifest) {
    std::vector<int> lacking;
    int holder = -1;
    for (int k = 0; k < view.size(); ++k) {
      const auto held = view.files[k].find(file);
      const bool holds = held != view.files[k].end() && held->second == size;
      if (holds && holder < 0) holder = k;
      if (!holds) lacking.push_back(k);
    }
    if (holder < 0) lost += (lost.empty() ? "" : ", ") + file;
    for (const int k : lacking) copies.push_back({file, size, holder, k});
  }
  if (!lost.empty()) {
    note("passing over the snapshot of iteration " + std::to_string(newest.iter) +
         ": no node's folder holds " + lost + " (the nodes that held them were lost)");
    return std::nullopt;
  }
  copy_between(view, folder_, copies);
  return Snapshot{newest.iter, entry(newest.iter)};
}

void Snapshots::take(strategy::BaseStrategy& strategy, const strategy::TrainProgress& progress) {
  settle();
  begin(progress.iter);
  strategy.save_checkpoint(entry(progress.iter), progress);
  publish(progress.iter);
}

void Snapshots::take_in_background(strategy::BaseStrategy& strategy,
                                   const strategy::TrainProgress& progress) {
  settle();
  begin(progress.iter);
  checkpoint::DeferredSaves capture;
  strategy.save_checkpoint(entry(progress.iter), progress);
  pending_ = Pending{progress.iter, capture.write_in_background()};
}

void Snapshots::settle() {
  if (!pending_) return;
  Pending pending = std::move(*std::exchange(pending_, std::nullopt));
  checkpoint::throw_if_any_rank_failed(
      pending.failure.get(), "write the snapshot of iteration " + std::to_string(pending.iter));
  publish(pending.iter);
}

void Snapshots::begin(int64_t iter) {
  if (!layout_) learn_layout(survey(folder_, kMarker));
  // A snapshot of this iteration that a killed attempt wrote and never
  // committed goes first, so that no file of it mixes with the new one.
  const std::string path = entry(iter);
  checkpoint::where_for_all(
      layout_->leads, [&] { io::remove_all(path); }, "clear the uncommitted snapshot " + path);
}

void Snapshots::publish(int64_t iter) {
  const std::string name = entry_name(iter);
  const std::string committing = "commit the snapshot of iteration " + std::to_string(iter);
  if (layout_->folders == 1) {  // every file is in this folder: nothing to copy
    checkpoint::where_for_all(
        layout_->leads, [&] { commit(iter, under(files_in(folder_, kMarker), name)); }, committing);
    return;
  }
  const FolderView view = survey(folder_, kMarker);
  Files manifest;
  std::vector<Copy> copies;
  for (int k = 0; k < view.size(); ++k) {
    const int next = (k + 1) % view.size();
    for (const auto& [file, size] : under(view.files[k], name)) {
      manifest.emplace(file, size);
      if (!view.files[next].count(file)) copies.push_back({file, size, k, next});
    }
  }
  copy_between(view, folder_, copies);
  // The first folder commits alone, so that a failure there leaves no
  // folder committed.
  const auto commit_here = [&] { commit(iter, manifest); };
  checkpoint::where_for_all(layout_->leads && view.mine == 0, commit_here, committing);
  checkpoint::where_for_all(layout_->leads && view.mine != 0, commit_here,
                            committing + " on the other nodes");
}

void Snapshots::learn_layout(const FolderView& view) const {
  layout_ = Layout{view.leads(dist::get_rank()), view.size()};
}

void Snapshots::commit(int64_t iter, const Files& manifest) {
  io::write_atomically((fs::path(folder_) / kMarker).string(), {marker_content(iter, manifest)},
                       fs_);
  const fs::path kept = entry_name(iter);
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
