#include "engine/snapshot/folders.h"

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "engine/checkpoint/all_ranks.h"
#include "engine/checkpoint/file.h"
#include "engine/dist/dist.h"
#include "engine/io/atomic_file.h"

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

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw std::runtime_error(path + ": cannot be read");
  return bytes;
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
    if (fs::exists(marker_path)) mine.marker = read_whole(marker_path.string());
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
                  const std::vector<Copy>& copies) {
  const int me = dist::get_rank();
  const at::Device device = dist::get_comm_device();
  std::string failure;
  for (const Copy& copy : copies) {
    const std::string path = (fs::path(folder) / copy.file).string();
    const auto note = [&](const std::function<void()>& step) {
      if (failure.empty()) failure = dist::failure_of(step);
    };
    if (me == view.leaders[copy.from]) {
      at::Tensor bytes = at::zeros({copy.size}, at::kByte);
      note([&] {
        const std::string content = read_whole(path);
        if (static_cast<int64_t>(content.size()) != copy.size) {
          throw std::runtime_error(path + " changed size while it was copied");
        }
        std::memcpy(bytes.data_ptr(), content.data(), content.size());
      });
      if (copy.size > 0) dist::send(bytes.to(device), view.leaders[copy.to]);
    } else if (me == view.leaders[copy.to]) {
      at::Tensor bytes = at::empty({copy.size}, at::TensorOptions(device).dtype(at::kByte));
      if (copy.size > 0) dist::recv(bytes, view.leaders[copy.from]);
      const at::Tensor host = bytes.cpu();
      note([&] {
        io::write_atomically(path, {std::string_view(static_cast<const char*>(host.data_ptr()),
                                                     static_cast<size_t>(copy.size))});
      });
    }
  }
  if (!copies.empty()) {
    checkpoint::throw_if_any_rank_failed(failure, "copy a snapshot's files between nodes");
  }
}

}  // namespace engine::snapshot
