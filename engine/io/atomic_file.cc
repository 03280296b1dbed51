#include "engine/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace engine::io {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw FileError(path + ": " + what);
}

void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, std::string("write failed: ") + std::strerror(errno));
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void sync_folder(const std::filesystem::path& folder) {
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some filesystems cannot open folders
  ::fsync(fd);
  ::close(fd);
}

// Owns a file descriptor and the temporary file until it is renamed.
class TemporaryFile {
 public:
  explicit TemporaryFile(const std::string& final_path)
      : path_(final_path + ".tmp." + std::to_string(::getpid())) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail(final_path, "cannot create " + path_ + ": " + std::strerror(errno));
  }
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(path_.c_str());
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  void sync_and_close(const std::string& final_path) {
    if (::fsync(fd_) != 0) fail(final_path, std::string("fsync failed: ") + std::strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(final_path, std::string("close failed: ") + std::strerror(errno));
  }
  void rename_to(const std::string& final_path) {
    if (::rename(path_.c_str(), final_path.c_str()) != 0) {
      fail(final_path, "cannot rename " + path_ + ": " + std::strerror(errno));
    }
    renamed_ = true;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool renamed_ = false;
};

}  // namespace

void write_atomically(const std::string& path, const std::vector<std::string_view>& pieces,
                      const BeforeRename& before_rename) {
  const std::filesystem::path final_path(path);
  std::error_code error;
  if (final_path.has_parent_path())
    std::filesystem::create_directories(final_path.parent_path(), error);
  if (error) fail(path, "cannot create its folder: " + error.message());
  TemporaryFile file(path);
  for (const auto piece : pieces) write_all(file.fd(), piece, path);
  file.sync_and_close(path);
  if (before_rename) before_rename(file.path());
  file.rename_to(path);
  sync_folder(final_path.parent_path());
}

}  // namespace engine::io
