#include "engine/dist/zip_index.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kDirectorySignature = 0x02014b50;
constexpr uint32_t kLocalSignature = 0x04034b50;
constexpr size_t kEndBytes = 22;
constexpr size_t kZip64LocatorBytes = 20;
constexpr size_t kDirectoryBytes = 46;
constexpr size_t kLocalBytes = 30;
constexpr size_t kMaxCommentBytes = 0xFFFF;
constexpr uint64_t kSaturated32 = 0xFFFFFFFF;
constexpr uint16_t kZip64ExtraId = 1;
constexpr uint64_t kDosFolderAttribute = 0x10;
constexpr uint64_t kUnreadableFlags = 0x1 | 0x20 | 0x40;  // encrypted, patch, strong encryption

// Little-endian fields of the archive, each checked to lie inside it.
class Fields {
 public:
  Fields(std::string_view bytes, const std::string& what) : bytes_(bytes), what_(what) {}

  size_t size() const { return bytes_.size(); }

  uint64_t at(uint64_t offset, size_t width) const {
    const std::string_view field = span(offset, width, "a field");
    uint64_t value = 0;
    for (size_t i = width; i-- > 0;) value = value << 8 | static_cast<unsigned char>(field[i]);
    return value;
  }

  std::string_view span(uint64_t offset, uint64_t length, const std::string& of) const {
    if (offset > bytes_.size() || length > bytes_.size() - offset) {
      fail(of + " at byte " + std::to_string(offset) + " (" + std::to_string(length) +
           " bytes) runs past the archive's end");
    }
    return bytes_.substr(offset, length);
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw MalformedInput(what_ + " is not a readable torch.save archive (" +
                         std::to_string(bytes_.size()) + " bytes): " + why);
  }

 private:
  std::string_view bytes_;
  const std::string& what_;
};

struct Directory {
  uint64_t entries = 0;
  uint64_t size = 0;
  uint64_t offset = 0;
  uint64_t end = 0;  // where the records and the directory must stop
};

// The end-of-central-directory record whose comment reaches the archive's
// last byte.
uint64_t find_end_record(const Fields& fields) {
  if (fields.size() >= kEndBytes) {
    const uint64_t last = fields.size() - kEndBytes;
    const uint64_t first = last - std::min<uint64_t>(last, kMaxCommentBytes);
    for (uint64_t at = last + 1; at-- > first;) {
      if (fields.at(at, 4) == kEndSignature &&
          at + kEndBytes + fields.at(at + 20, 2) == fields.size()) {
        return at;
      }
    }
  }
  fields.fail("no end-of-central-directory record ends it (cut short, or not a zip)");
}

// The zip64 end record that a locator right before the end record points
// to, if there is one: readers (miniz, Python's zipfile) then take their
// counts from it, whatever the 32-bit fields say.
std::optional<uint64_t> zip64_end_record(const Fields& fields, uint64_t end) {
  if (end < kZip64LocatorBytes ||
      fields.at(end - kZip64LocatorBytes, 4) != kZip64LocatorSignature) {
    return std::nullopt;
  }
  const uint64_t zip64_end = fields.at(end - kZip64LocatorBytes + 8, 8);
  if (zip64_end > fields.size() || fields.size() - zip64_end < 4 ||
      fields.at(zip64_end, 4) != kZip64EndSignature) {
    return std::nullopt;
  }
  return zip64_end;
}

Directory read_directory(const Fields& fields) {
  const uint64_t end = find_end_record(fields);
  Directory dir{fields.at(end + 10, 2), fields.at(end + 12, 4), fields.at(end + 16, 4), end};
  uint64_t entries_on_this_disk = fields.at(end + 8, 2);
  if (const auto zip64_end = zip64_end_record(fields, end)) {
    dir = {fields.at(*zip64_end + 32, 8), fields.at(*zip64_end + 40, 8),
           fields.at(*zip64_end + 48, 8), *zip64_end};
    entries_on_this_disk = fields.at(*zip64_end + 24, 8);
  } else if (dir.entries == 0xFFFF || dir.size == kSaturated32 || dir.offset == kSaturated32) {
    fields.fail("its end record asks for zip64 fields and no zip64 end record precedes it");
  }
  if (entries_on_this_disk != dir.entries) {
    fields.fail(std::to_string(dir.entries) + " records in all and " +
                std::to_string(entries_on_this_disk) + " on this disk (a split archive?)");
  }
  if (dir.offset > dir.end || dir.size > dir.end - dir.offset) {
    fields.fail("its central directory (" + std::to_string(dir.size) + " bytes at byte " +
                std::to_string(dir.offset) + ") runs past its end record");
  }
  if (dir.entries > dir.size / kDirectoryBytes) {
    fields.fail(std::to_string(dir.entries) + " records declared in a " + std::to_string(dir.size) +
                "-byte central directory");
  }
  return dir;
}

struct Entry {
  std::string name;
  uint64_t flags = 0;
  uint64_t external_attributes = 0;
  uint64_t method = 0;
  uint64_t compressed = 0;
  uint64_t size = 0;
  uint64_t local = 0;
  uint64_t next = 0;  // the following directory entry
};

// Zip64's extra field holds, in this order, each of the three whose 32-bit
// field is saturated.
void read_zip64_extra(const Fields& fields, uint64_t extra, uint64_t length, Entry& entry) {
  for (uint64_t at = extra; at + 4 <= extra + length;) {
    const uint64_t id = fields.at(at, 2);
    const uint64_t bytes = fields.at(at + 2, 2);
    if (id == kZip64ExtraId) {
      uint64_t field = at + 4;
      for (uint64_t* value : {&entry.size, &entry.compressed, &entry.local}) {
        if (*value != kSaturated32) continue;
        if (field + 8 > at + 4 + bytes)
          fields.fail("record " + entry.name + "'s zip64 field is short");
        *value = fields.at(field, 8);
        field += 8;
      }
      return;
    }
    at += 4 + bytes;
  }
}

Entry read_entry(const Fields& fields, uint64_t at) {
  if (fields.at(at, 4) != kDirectorySignature) {
    fields.fail("no central directory entry at byte " + std::to_string(at));
  }
  const uint64_t name_bytes = fields.at(at + 28, 2);
  const uint64_t extra_bytes = fields.at(at + 30, 2);
  const uint64_t comment_bytes = fields.at(at + 32, 2);
  Entry entry{std::string(fields.span(at + kDirectoryBytes, name_bytes, "a record's name")),
              fields.at(at + 8, 2),
              fields.at(at + 38, 4),
              fields.at(at + 10, 2),
              fields.at(at + 20, 4),
              fields.at(at + 24, 4),
              fields.at(at + 42, 4),
              at + kDirectoryBytes + name_bytes + extra_bytes + comment_bytes};
  read_zip64_extra(fields, at + kDirectoryBytes + name_bytes, extra_bytes, entry);
  return entry;
}

// The record's bytes, after its local header.
std::string_view record_bytes(const Fields& fields, const Entry& entry, const Directory& dir) {
  // miniz extracts nothing from a folder's record (and reports success), and
  // refuses encrypted and patch records.
  if (entry.external_attributes & kDosFolderAttribute || entry.name.empty() ||
      entry.name.back() == '/') {
    fields.fail("record " + entry.name + " is marked a folder");
  }
  if (entry.flags & kUnreadableFlags) {
    fields.fail("record " + entry.name + " is encrypted or a patch (flags " +
                std::to_string(entry.flags) + ")");
  }
  if (entry.method != 0) {
    fields.fail("record " + entry.name + " is compressed (method " + std::to_string(entry.method) +
                "); torch.save stores its records as they are");
  }
  if (entry.compressed != entry.size) {
    fields.fail("record " + entry.name + " declares " + std::to_string(entry.size) + " bytes and " +
                std::to_string(entry.compressed) + " stored bytes");
  }
  if (fields.at(entry.local, 4) != kLocalSignature) {
    fields.fail("record " + entry.name + " has no local header at byte " +
                std::to_string(entry.local));
  }
  const uint64_t data =
      entry.local + kLocalBytes + fields.at(entry.local + 26, 2) + fields.at(entry.local + 28, 2);
  if (data > dir.offset || entry.size > dir.offset - data) {
    fields.fail("record " + entry.name + " declares " + std::to_string(entry.size) +
                " bytes at byte " + std::to_string(data) + ", past the records' end at byte " +
                std::to_string(dir.offset));
  }
  return fields.span(data, entry.size, "record " + entry.name);
}

// miniz, inside PyTorchStreamReader, finds records by name without case.
std::string lowercase(std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

}  // namespace

std::map<std::string, std::string_view> zip_records(std::string_view archive,
                                                    const std::string& what) {
  const Fields fields(archive, what);
  const Directory dir = read_directory(fields);
  std::map<std::string, std::string_view> records;
  std::string folder;  // the first record's, as PyTorchStreamReader takes it
  uint64_t at = dir.offset;
  for (uint64_t i = 0; i < dir.entries; ++i) {
    const Entry entry = read_entry(fields, at);
    if (entry.next > dir.offset + dir.size) {
      fields.fail("central directory entry " + std::to_string(i) + " runs past the directory");
    }
    const std::string_view bytes = record_bytes(fields, entry, dir);
    const std::string name = lowercase(entry.name);
    if (i == 0) {
      const size_t slash = name.find('/');
      if (slash == std::string::npos) {
        fields.fail("its first record, " + entry.name + ", is not inside a folder");
      }
      folder = name.substr(0, slash + 1);
    }
    if (name.compare(0, folder.size(), folder) == 0 &&
        !records.emplace(name.substr(folder.size()), bytes).second) {
      fields.fail("two records are named " + name + " (names compare without case)");
    }
    at = entry.next;
  }
  if (records.empty()) fields.fail("it holds no record");
  return records;
}

}  // namespace engine::dist
