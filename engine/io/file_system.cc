#include "engine/io/file_system.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace engine::io {
namespace {

int status(bool ok) { return ok ? 0 : errno; }

// nftw's callback, children before their folder (FTW_DEPTH).
int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return ::remove(path) == 0 || errno == ENOENT ? 0 : errno;
}

class PosixFileSystem : public FileSystem {
 public:
  int create_directories(const std::string& folder) override {
    std::error_code error;
    std::filesystem::create_directories(folder, error);
    return error.value();
  }

  int open_for_write(const std::string& path, int& handle) override {
    handle = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    return status(handle >= 0);
  }

  int write(int handle, std::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = ::write(handle, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return 0;
  }

  int sync(int handle) override { return status(::fsync(handle) == 0); }
  int close(int handle) override { return status(::close(handle) == 0); }

  int rename(const std::string& from, const std::string& to) override {
    return status(::rename(from.c_str(), to.c_str()) == 0);
  }

  int remove(const std::string& path) override { return status(::unlink(path.c_str()) == 0); }

  int sync_folder(const std::string& folder) override {
    const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return errno;
    const int result = status(::fsync(fd) == 0);
    ::close(fd);
    return result;
  }
};

}  // namespace

FileSystem& posix_file_system() {
  static PosixFileSystem file_system;
  return file_system;
}

void remove_all(const std::string& path, std::error_code& error) {
  error.clear();
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno != ENOENT) error.assign(errno, std::generic_category());
    return;
  }
  constexpr int kOpenFolders = 16;
  const int result = ::nftw(path.c_str(), remove_entry, kOpenFolders, FTW_DEPTH | FTW_PHYS);
  if (result != 0) error.assign(result < 0 ? errno : result, std::generic_category());
}

std::string read_file(const std::string& path) {
  const auto fail = [&](const std::string& why) {
    throw std::runtime_error(path + ": cannot be read: " + why);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(std::strerror(errno));
  struct stat info {};
  std::string bytes;
  int error = ::fstat(fd, &info) == 0 ? 0 : errno;
  if (!error) bytes.resize(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (!error && done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0)
      done += static_cast<size_t>(n);
    else if (n == 0)
      break;
    else if (errno != EINTR)
      error = errno;
  }
  ::close(fd);
  if (error) fail(std::strerror(error));
  if (done < bytes.size()) fail("it shrank while it was read");
  return bytes;
}

void remove_all(const std::string& path) {
  std::error_code error;
  remove_all(path, error);
  if (error) throw std::system_error(error, "cannot remove " + path);
}

}  // namespace engine::io
