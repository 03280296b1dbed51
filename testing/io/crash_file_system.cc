#include "testing/io/crash_file_system.h"

#include <cerrno>
#include <filesystem>

namespace crash_fs {
namespace {

std::string folder_of(const std::string& path) {
  return std::filesystem::path(path).parent_path().string();
}

}  // namespace

void CrashFileSystem::put(const std::string& path, std::string_view content) {
  files_.push_back(File{std::string(content), std::string(content)});
  names_[path] = durable_names_[path] = files_.size() - 1;
}

void CrashFileSystem::crash() {
  crashed_ = true;
  names_ = durable_names_;
  for (File& file : files_) file.content = file.durable;
  open_.clear();
}

std::optional<std::string> CrashFileSystem::read(const std::string& path) const {
  const auto found = names_.find(path);
  if (found == names_.end()) return std::nullopt;
  return files_[found->second].content;
}

std::vector<std::string> CrashFileSystem::names() const {
  std::vector<std::string> all;
  for (const auto& [name, file] : names_) all.push_back(name);
  return all;
}

int CrashFileSystem::begin_step() {
  if (crashed_) return EIO;
  const int step = steps_++;
  if (crash_at_ == step) {
    crash();
    return EIO;
  }
  return fail_at_ == step ? fail_error_ : 0;
}

CrashFileSystem::File* CrashFileSystem::open_file(int handle) {
  const auto found = open_.find(handle);
  return found == open_.end() ? nullptr : &files_[found->second];
}

int CrashFileSystem::create_directories(const std::string&) { return begin_step(); }

int CrashFileSystem::open_for_write(const std::string& path, int& handle) {
  if (const int error = begin_step()) return error;
  const auto found = names_.find(path);
  size_t index = 0;
  if (found != names_.end()) {
    index = found->second;
    files_[index].content.clear();
  } else {
    files_.emplace_back();
    index = names_[path] = files_.size() - 1;
  }
  handle = next_handle_++;
  open_[handle] = index;
  return 0;
}

int CrashFileSystem::write(int handle, std::string_view data) {
  if (const int error = begin_step()) return error;
  File* file = open_file(handle);
  if (!file) return EBADF;
  file->content.append(data);
  return 0;
}

int CrashFileSystem::sync(int handle) {
  if (const int error = begin_step()) return error;
  File* file = open_file(handle);
  if (!file) return EBADF;
  file->durable = file->content;
  return 0;
}

int CrashFileSystem::close(int handle) {
  if (const int error = begin_step()) return error;
  return open_.erase(handle) == 1 ? 0 : EBADF;
}

int CrashFileSystem::rename(const std::string& from, const std::string& to) {
  if (const int error = begin_step()) return error;
  const auto found = names_.find(from);
  if (found == names_.end()) return ENOENT;
  const size_t index = found->second;
  names_.erase(found);
  names_[to] = index;
  return 0;
}

int CrashFileSystem::remove(const std::string& path) {
  if (const int error = begin_step()) return error;
  return names_.erase(path) == 1 ? 0 : ENOENT;
}

int CrashFileSystem::sync_folder(const std::string& folder) {
  if (const int error = begin_step()) return error;
  for (auto it = durable_names_.begin(); it != durable_names_.end();) {
    it = folder_of(it->first) == folder ? durable_names_.erase(it) : std::next(it);
  }
  for (const auto& [name, index] : names_) {
    if (folder_of(name) == folder) durable_names_[name] = index;
  }
  return 0;
}

}  // namespace crash_fs
