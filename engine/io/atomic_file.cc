#include "engine/io/atomic_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>

namespace engine::io {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what, int error) {
  throw FileError(path + ": " + what + ": " + std::strerror(error));
}

// A name beside `final_path` that no other write uses: not one of this
// process's (the simulator's ranks are threads of one process), nor another
// process's, on this host (the pid) or another that shares the folder (a
// random part).
std::string temporary_name(const std::string& final_path) {
  static std::atomic<uint64_t> writes{0};
  static const uint64_t process_salt =
      (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  return final_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(process_salt) +
         "." + std::to_string(writes++);
}

// Owns the temporary file until it is renamed: removed if anything fails.
class TemporaryFile {
 public:
  TemporaryFile(FileSystem& fs, const std::string& final_path)
      : fs_(fs), final_path_(final_path), path_(temporary_name(final_path)) {
    if (const int error = fs_.open_for_write(path_, handle_)) {
      handle_ = -1;
      fail(final_path_, "cannot create " + path_, error);
    }
  }
  ~TemporaryFile() {
    if (handle_ >= 0) fs_.close(handle_);
    if (!renamed_) fs_.remove(path_);
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  void write(std::string_view data) {
    if (const int error = fs_.write(handle_, data)) fail(final_path_, "write failed", error);
  }
  void sync_and_close() {
    if (const int error = fs_.sync(handle_)) fail(final_path_, "fsync failed", error);
    const int handle = handle_;
    handle_ = -1;
    if (const int error = fs_.close(handle)) fail(final_path_, "close failed", error);
  }
  void rename_into_place() {
    if (const int error = fs_.rename(path_, final_path_)) {
      fail(final_path_, "cannot rename " + path_, error);
    }
    renamed_ = true;
  }

 private:
  FileSystem& fs_;
  const std::string final_path_;
  const std::string path_;
  int handle_ = -1;
  bool renamed_ = false;
};

}  // namespace

void write_atomically(const std::string& path, const std::vector<std::string_view>& pieces,
                      FileSystem& fs) {
  const std::string folder = std::filesystem::path(path).parent_path().string();
  if (!folder.empty()) {
    if (const int error = fs.create_directories(folder))
      fail(path, "cannot create its folder", error);
  }
  TemporaryFile file(fs, path);
  for (const auto piece : pieces) file.write(piece);
  file.sync_and_close();
  file.rename_into_place();
  // Until the folder is synced the rename may be lost in a crash. File
  // systems that cannot sync a folder say EINVAL; any other failure means
  // the new file may not survive one, which the caller must hear.
  const int error = fs.sync_folder(folder);
  if (error != 0 && error != EINVAL) fail(path, "cannot sync its folder", error);
}

}  // namespace engine::io
