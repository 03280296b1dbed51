#include "engine/snapshot/folders.h"

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "engine/checkpoint/all_ranks.h"
#include "engine/checkpoint/file.h"
#include "engine/dist/dist.h"
#include "engine/io/atomic_file.h"
#include "engine/io/file_system.h"

namespace engine::snapshot {
namespace {

namespace fs = std::filesystem;

// Equal for two ranks exactly when their `folder` is one directory.
std::string identity_of(const std::string& folder) {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) {
    throw std::runtime_error(std::string("gethostname failed: ") + std::strerror(errno));
  }
  struct stat info {};
  if (stat(folder.c_str(), &info) != 0) {
    throw std::runtime_error(folder + ": " + std::strerror(errno));
  }
  return std::string(host) + ":" + std::to_string(info.st_dev) + ":" + std::to_string(info.st_ino);
}

// `copies` taken from each source folder in turn (the first copy of each,
// then the second of each, ...), so that a window of them holds copies in
// every direction. The same order on every rank.
std::vector<Copy> by_turns_of_source(const std::vector<Copy>& copies) {
  std::map<int, size_t> taken;                   // by source folder
  std::vector<std::pair<size_t, size_t>> turns;  // (turn, position in `copies`)
  for (size_t i = 0; i < copies.size(); ++i) turns.emplace_back(taken[copies[i].from]++, i);
  std::stable_sort(turns.begin(), turns.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Copy> ordered;
  for (const auto& turn : turns) ordered.push_back(copies[turn.second]);
  return ordered;
}

// The end of the window of `copies` that starts at `begin`: as many as fit
// in `limit` bytes, and at least one.
size_t end_of_window(const std::vector<Copy>& copies, size_t begin, int64_t limit) {
  size_t end = begin + 1;
  int64_t bytes = copies[begin].size;
  while (end < copies.size() && bytes + copies[end].size <= limit) {
    bytes += copies[end++].size;
  }
  return end;
}

// The file at `path` into `bytes`, which must hold exactly all of it.
void read_into(at::Tensor& bytes, const std::string& path) {
  const std::string content = io::read_file(path);
  if (static_cast<int64_t>(content.size()) != bytes.numel()) {
    throw std::runtime_error(path + " changed size while it was copied");
  }
  // An empty file's tensor has no storage: memcpy may not take its null.
  if (!content.empty()) std::memcpy(bytes.data_ptr(), content.data(), content.size());
}

// What one rank tells the others in survey(): what it could not do, or
// what its folder holds.
struct Report {
  std::string failure;
  std::string identity;
  std::string marker;
  Files files;

  c10::IValue to_ivalue() const {
    c10::List<std::string> paths;
    c10::List<int64_t> sizes;
    for (const auto& [path, size] : files) {
      paths.push_back(path);
      sizes.push_back(size);
    }
    return c10::ivalue::Tuple::create({failure, identity, marker, paths, sizes});
  }

  static Report from(const c10::IValue& value) {
    const auto& items = value.toTupleRef().elements();
    Report out{items[0].toStringRef(), items[1].toStringRef(), items[2].toStringRef(), {}};
    const auto paths = items[3].toList();
    const auto sizes = items[4].toList();
    for (size_t i = 0; i < paths.size(); ++i) {
      out.files[paths.get(i).toStringRef()] = sizes.get(i).toInt();
    }
    return out;
  }
};

}  // namespace

// A background save renames its temporary files as it goes, so a file may
// be gone between the listing and its size.
Files files_in(const std::string& folder, const std::string& marker) {
  Files out;
  std::error_code listing;
  fs::recursive_directory_iterator item(folder, listing), end;
  for (; !listing && item != end; item.increment(listing)) {
    std::error_code gone;
    if (!item->is_regular_file(gone)) continue;
    const uintmax_t size = item->file_size(gone);
    if (gone) continue;
    const std::string relative = item->path().lexically_relative(folder).string();
    if (relative != marker) out[relative] = static_cast<int64_t>(size);
  }
  if (listing) throw fs::filesystem_error("cannot list the folder", folder, listing);
  return out;
}

FolderView survey(const std::string& folder, const std::string& marker) {
  Report mine;
  mine.failure = dist::failure_of([&] {
    fs::create_directories(folder);
    mine.identity = identity_of(folder);
    const fs::path marker_path = fs::path(folder) / marker;
    if (fs::exists(marker_path)) mine.marker = io::read_file(marker_path.string());
    mine.files = files_in(folder, marker);
  });
  std::vector<Report> reports;
  std::vector<std::string> failures;
  for (const c10::IValue& report : dist::all_gather_object(mine.to_ivalue())) {
    reports.push_back(Report::from(report));
    failures.push_back(reports.back().failure);
  }
  const std::string failed =
      dist::describe_failures(failures, "read the snapshot folder " + folder);
  if (!failed.empty()) throw checkpoint::CheckpointError(dist::on_rank(dist::get_rank(), failed));
  FolderView view;
  std::map<std::string, int> folder_of;
  for (size_t rank = 0; rank < reports.size(); ++rank) {
    Report& report = reports[rank];
    const auto [at, added] =
        folder_of.emplace(report.identity, static_cast<int>(view.leaders.size()));
    if (added) {
      view.leaders.push_back(static_cast<int>(rank));
      view.files.push_back(std::move(report.files));
      view.markers.push_back(std::move(report.marker));
    }
  }
  view.mine = folder_of.at(mine.identity);
  return view;
}

void copy_between(const FolderView& view, const std::string& folder,
                  const std::vector<Copy>& copies, int64_t bytes_in_flight) {
  const int me = dist::get_rank();
  const at::Device device = dist::get_comm_device();
  std::string failure;
  const auto note = [&](const std::function<void()>& step) {
    if (failure.empty()) failure = dist::failure_of(step);
  };
  const std::vector<Copy> ordered = by_turns_of_source(copies);
  for (size_t begin = 0, end = 0; begin < ordered.size(); begin = end) {
    end = end_of_window(ordered, begin, bytes_in_flight);
    // Posted in the window's order on every rank, which is what keeps
    // backends whose point-to-point calls run in order (nccl's) from a
    // deadlock; the others move the window's copies side by side.
    std::vector<std::pair<const Copy*, at::Tensor>> received;
    std::vector<at::Tensor> sent;  // alive until their sends complete
    std::vector<dist::WorkPtr> works;
    for (size_t i = begin; i < end; ++i) {
      const Copy& copy = ordered[i];
      if (me == view.leaders[copy.to]) {
        at::Tensor bytes = at::empty({copy.size}, at::TensorOptions(device).dtype(at::kByte));
        if (copy.size > 0) works.push_back(dist::recv_async(bytes, view.leaders[copy.from]));
        received.emplace_back(&copy, bytes);
      } else if (me == view.leaders[copy.from]) {
        // Zeros where the file cannot be read: the receiver still waits for
        // its bytes, and the failure is everyone's at the end.
        at::Tensor bytes = at::zeros({copy.size}, at::kByte);
        note([&] { read_into(bytes, (fs::path(folder) / copy.file).string()); });
        if (copy.size == 0) continue;
        sent.push_back(bytes.to(device));
        works.push_back(dist::send_async(sent.back(), view.leaders[copy.to]));
      }
    }
    for (const dist::WorkPtr& work : works) work->wait();
    for (const auto& [copy, bytes] : received) {
      const at::Tensor host = bytes.cpu();
      note([&] {
        io::write_atomically((fs::path(folder) / copy->file).string(),
                             {std::string_view(static_cast<const char*>(host.data_ptr()),
                                               static_cast<size_t>(copy->size))});
      });
    }
  }
  if (!copies.empty()) {
    checkpoint::throw_if_any_rank_failed(failure, "copy a snapshot's files between nodes");
  }
}

}  // namespace engine::snapshot
