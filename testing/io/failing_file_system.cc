#include "testing/io/failing_file_system.h"

#include <cerrno>

namespace failing_fs {

int FailingFileSystem::begin_step() {
  if (crashed_) return EIO;
  const int step = steps_++;
  if (crash_at_ == step) {
    crashed_ = true;
    throw Crashed();
  }
  return fail_at_ == step ? fail_error_ : 0;
}

int FailingFileSystem::create_directories(const std::string& folder) {
  if (const int error = begin_step()) return error;
  return real_.create_directories(folder);
}

int FailingFileSystem::open_for_write(const std::string& path, int& handle) {
  if (const int error = begin_step()) return error;
  return real_.open_for_write(path, handle);
}

int FailingFileSystem::write(int handle, std::string_view data) {
  if (const int error = begin_step()) return error;
  return real_.write(handle, data);
}

int FailingFileSystem::sync(int handle) {
  if (const int error = begin_step()) return error;
  return real_.sync(handle);
}

int FailingFileSystem::close(int handle) {
  if (const int error = begin_step()) return error;
  return real_.close(handle);
}

int FailingFileSystem::rename(const std::string& from, const std::string& to) {
  if (const int error = begin_step()) return error;
  return real_.rename(from, to);
}

int FailingFileSystem::remove(const std::string& path) {
  if (const int error = begin_step()) return error;
  return real_.remove(path);
}

int FailingFileSystem::sync_folder(const std::string& folder) {
  if (const int error = begin_step()) return error;
  return real_.sync_folder(folder);
}

}  // namespace failing_fs
