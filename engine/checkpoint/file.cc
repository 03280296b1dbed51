#include "engine/checkpoint/file.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/dist/pickle.h"

namespace engine::checkpoint {
namespace {

constexpr char kMagic[8] = {'D', 'E', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr uint32_t kVersion = 1;

// Fixed-width little-endian fields; the payload follows.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t crc32;
  uint64_t payload_size;
};
static_assert(sizeof(Header) == 24, "the header layout is part of the file format");

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw CheckpointError("checkpoint " + path + ": " + what);
}

uint32_t checksum(const char* data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes at most 4 GiB per call.
  constexpr size_t kChunk = size_t{1} << 30;
  for (size_t offset = 0; offset < size; offset += kChunk) {
    const size_t n = std::min(kChunk, size - offset);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data + offset), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

void write_all(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, std::string("write failed: ") + std::strerror(errno));
    data += n;
    size -= static_cast<size_t>(n);
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

void save_file(const std::string& path, const c10::IValue& content,
               const BeforeRename& before_rename) {
  const at::Tensor payload = dist::pickle(content);
  const char* bytes = static_cast<const char*>(payload.data_ptr());
  const auto size = static_cast<size_t>(payload.numel());
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kVersion;
  header.crc32 = checksum(bytes, size);
  header.payload_size = size;

  const std::filesystem::path final_path(path);
  if (final_path.has_parent_path()) std::filesystem::create_directories(final_path.parent_path());
  TemporaryFile file(path);
  write_all(file.fd(), reinterpret_cast<const char*>(&header), sizeof(header), path);
  write_all(file.fd(), bytes, size, path);
  file.sync_and_close(path);
  if (before_rename) before_rename(file.path());
  file.rename_to(path);
  sync_folder(final_path.parent_path());
}

c10::IValue load_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, "cannot open it (" + std::string(std::strerror(errno)) + ")");
  const auto file_size = static_cast<size_t>(in.tellg());
  in.seekg(0);
  Header header{};
  if (file_size < sizeof(header)) {
    fail(path, "truncated: " + std::to_string(file_size) + " bytes, shorter than the " +
                   std::to_string(sizeof(header)) + "-byte header");
  }
  in.read(reinterpret_cast<char*>(&header), sizeof(header));
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    fail(path, "not a dist-engine checkpoint (wrong magic bytes)");
  }
  if (header.version != kVersion) {
    fail(path, "format version " + std::to_string(header.version) + ", this build reads " +
                   std::to_string(kVersion));
  }
  const size_t payload_size = file_size - sizeof(header);
  if (payload_size != header.payload_size) {
    fail(path, (payload_size < header.payload_size ? "truncated: " : "trailing bytes: ") +
                   std::to_string(payload_size) + " payload bytes where the header says " +
                   std::to_string(header.payload_size));
  }
  // Read once, straight into the tensor the unpickler takes.
  at::Tensor bytes = at::empty({static_cast<int64_t>(payload_size)}, at::kByte);
  char* payload = static_cast<char*>(bytes.data_ptr());
  if (!in.read(payload, static_cast<std::streamsize>(payload_size))) {
    fail(path, "read failed after the header (" + std::string(std::strerror(errno)) + ")");
  }
  if (checksum(payload, payload_size) != header.crc32) {
    fail(path, "corrupt: the CRC-32 of its contents does not match the header");
  }
  try {
    return dist::unpickle(bytes, "checkpoint " + path);
  } catch (const dist::DistError& error) {
    fail(path, std::string("unreadable contents: ") + error.what());
  }
}

}  // namespace engine::checkpoint
