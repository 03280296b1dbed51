#include "engine/checkpoint/file.h"

#include <ATen/ATen.h>
#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "engine/dist/pickle.h"
#include "engine/io/atomic_file.h"

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

}  // namespace

void save_file(const std::string& path, const c10::IValue& content, io::FileSystem& fs) {
  const at::Tensor payload = dist::pickle(content);
  const std::string_view bytes(static_cast<const char*>(payload.data_ptr()),
                               static_cast<size_t>(payload.numel()));
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kVersion;
  header.crc32 = checksum(bytes.data(), bytes.size());
  header.payload_size = bytes.size();
  try {
    io::write_atomically(
        path, {std::string_view(reinterpret_cast<const char*>(&header), sizeof(header)), bytes},
        fs);
  } catch (const io::FileError& error) {
    throw CheckpointError(std::string("checkpoint ") + error.what());
  }
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
