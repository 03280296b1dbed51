#include "engine/checkpoint/file.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "engine/checkpoint/deferred_saves.h"
#include "engine/dist/pickle.h"
#include "engine/io/atomic_file.h"

namespace engine::checkpoint {
namespace {

constexpr char kMagic[8] = {'D', 'E', 'C', 'K', 'P', 'T', '\r', '\n'};
// 1: the envelope first, then the pickle. 2: the pickle (a torch.save zip),
// then the envelope as the zip's comment.
constexpr uint32_t kVersion = 2;
constexpr uint32_t kFirstVersion = 1;

// Fixed-width little-endian fields. Version 1 put them before the payload;
// version 2 puts them after it, as the comment of the payload's zip, so that
// the file stays one zip archive that torch.load reads.
struct Envelope {
  char magic[8];
  uint32_t version;
  uint32_t crc32;
  uint64_t payload_size;
};
static_assert(sizeof(Envelope) == 24, "the envelope layout is part of the file format");

// A zip archive ends with its end-of-central-directory record, whose last
// field is the length of the archive's comment (little-endian uint16).
constexpr char kZipStart[4] = {'P', 'K', '\x03', '\x04'};
constexpr size_t kZipCommentLengthBytes = 2;

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

bool starts_with(std::string_view bytes, const char* prefix, size_t size) {
  return bytes.size() >= size && std::memcmp(bytes.data(), prefix, size) == 0;
}

Envelope envelope_at(std::string_view bytes, size_t offset) {
  Envelope envelope{};
  std::memcpy(&envelope, bytes.data() + offset, sizeof(envelope));
  return envelope;
}

// A file's bytes, read once into the tensor the unpickler takes, and viewed
// as characters.
struct FileBytes {
  at::Tensor tensor;
  std::string_view view() const {
    return {static_cast<const char*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel())};
  }
};

// Unpickles `payload` (a part of `file`, not copied); a failure is a
// CheckpointError that starts with `what`.
c10::IValue unpickled(const std::string& path, const FileBytes& file, std::string_view payload,
                      const std::string& what = "unreadable contents: ") {
  const auto offset = static_cast<int64_t>(payload.data() - file.view().data());
  const at::Tensor bytes = file.tensor.narrow(0, offset, static_cast<int64_t>(payload.size()));
  try {
    return dist::unpickle(bytes, "checkpoint " + path);
  } catch (const dist::DistError& error) {
    fail(path, what + error.what());
  }
}

void check_envelope(const std::string& path, const Envelope& envelope, size_t payload_size,
                    std::string_view payload) {
  if (envelope.version != kVersion && envelope.version != kFirstVersion) {
    fail(path, "format version " + std::to_string(envelope.version) + ", this build reads " +
                   std::to_string(kFirstVersion) + " and " + std::to_string(kVersion));
  }
  if (payload_size != envelope.payload_size) {
    fail(path, (payload_size < envelope.payload_size ? "truncated: " : "trailing bytes: ") +
                   std::to_string(payload_size) + " payload bytes where the envelope says " +
                   std::to_string(envelope.payload_size));
  }
  if (checksum(payload.data(), payload.size()) != envelope.crc32) {
    fail(path, "corrupt: the CRC-32 of its contents does not match the envelope's");
  }
}

// Version 1: the envelope, then the payload.
c10::IValue load_first_version(const std::string& path, const FileBytes& bytes) {
  const std::string_view file = bytes.view();
  const Envelope envelope = envelope_at(file, 0);
  const std::string_view payload = file.substr(sizeof(Envelope));
  check_envelope(path, envelope, payload.size(), payload);
  return unpickled(path, bytes, payload);
}

// A zip archive that does not end with the engine's envelope: a torch.save
// file, or one of the engine's cut short or with bytes after its end (the
// envelope's magic, found near the end, tells those apart).
c10::IValue load_zip_without_envelope(const std::string& path, const FileBytes& bytes) {
  const std::string_view file = bytes.view();
  const size_t searched = std::min(file.size(), size_t{64} * 1024);
  const std::string_view tail = file.substr(file.size() - searched);
  const size_t found = tail.rfind(std::string_view(kMagic, sizeof(kMagic)));
  if (found != std::string_view::npos) {
    const size_t end = file.size() - searched + found + sizeof(Envelope);
    fail(path, end > file.size() ? "truncated: its envelope is cut short (" +
                                       std::to_string(file.size()) + " bytes)"
                                 : "trailing bytes: " + std::to_string(file.size() - end) +
                                       " bytes after the checkpoint's end");
  }
  // torch.save's own format: the zip's records carry their own CRC-32s.
  return unpickled(path, bytes, file,
                   "neither a whole dist-engine checkpoint (its envelope is missing: truncated?) "
                   "nor a torch.save file that this LibTorch's unpickler reads (it builds dicts, "
                   "lists, tuples, tensors, numbers and strings, not the OrderedDict that "
                   "state_dict() returns: save dict(model.state_dict()); LibTorch 1.13's lacks "
                   "opcodes that PyTorch 2.x writes): ");
}

FileBytes read_whole(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    fail(path,
         "a folder, not a checkpoint file (a sharded checkpoint is read through the "
         "strategy that saved it)");
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, "cannot open it (" + std::string(std::strerror(errno)) + ")");
  FileBytes bytes{at::empty({static_cast<int64_t>(in.tellg())}, at::kByte)};
  in.seekg(0);
  if (!in.read(static_cast<char*>(bytes.tensor.data_ptr()),
               static_cast<std::streamsize>(bytes.tensor.numel()))) {
    fail(path, "read failed (" + std::string(std::strerror(errno)) + ")");
  }
  return bytes;
}

}  // namespace

void save_file(const std::string& path, const c10::IValue& content, io::FileSystem& fs) {
  if (DeferredSaves::defer(path, content, fs)) return;
  const at::Tensor pickled = dist::pickle_untagged(content);
  auto* archive = static_cast<char*>(pickled.data_ptr());
  const std::string_view payload(archive, static_cast<size_t>(pickled.numel()));
  // The zip's comment becomes the envelope: its length goes in the archive's
  // last field before the checksum covers the archive.
  const uint16_t comment_length = sizeof(Envelope);
  std::memcpy(archive + payload.size() - kZipCommentLengthBytes, &comment_length,
              sizeof(comment_length));
  Envelope envelope{};
  std::memcpy(envelope.magic, kMagic, sizeof(kMagic));
  envelope.version = kVersion;
  envelope.crc32 = checksum(payload.data(), payload.size());
  envelope.payload_size = payload.size();
  try {
    io::write_atomically(
        path,
        {payload, std::string_view(reinterpret_cast<const char*>(&envelope), sizeof(envelope))},
        fs);
  } catch (const io::FileError& error) {
    throw CheckpointError(std::string("checkpoint ") + error.what());
  }
}

c10::IValue load_file(const std::string& path) {
  const FileBytes bytes = read_whole(path);
  const std::string_view file = bytes.view();
  if (file.size() < sizeof(Envelope)) {
    fail(path, "truncated: " + std::to_string(file.size()) + " bytes, shorter than the " +
                   std::to_string(sizeof(Envelope)) + "-byte envelope");
  }
  if (starts_with(file, kMagic, sizeof(kMagic))) return load_first_version(path, bytes);
  if (!starts_with(file, kZipStart, sizeof(kZipStart))) {
    fail(path, "not a dist-engine checkpoint (wrong magic bytes) nor a torch.save file");
  }
  const size_t payload_size = file.size() - sizeof(Envelope);
  const Envelope envelope = envelope_at(file, payload_size);
  if (!starts_with(std::string_view(envelope.magic, sizeof(kMagic)), kMagic, sizeof(kMagic))) {
    return load_zip_without_envelope(path, bytes);
  }
  const std::string_view payload = file.substr(0, payload_size);
  check_envelope(path, envelope, payload_size, payload);
  return unpickled(path, bytes, file);
}

}  // namespace engine::checkpoint
