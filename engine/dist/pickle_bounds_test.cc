#include "engine/dist/pickle_bounds.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/ones.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/dist/pickle.h"

namespace engine::dist {
namespace {

// Pickle opcodes, written by hand: the hostile archives below are what no
// pickler of ours would write.
std::string u32(uint32_t value) {
  std::string bytes(4, '\0');
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>(value >> (8 * i));
  return bytes;
}
std::string proto() { return "\x80\x02"; }
std::string stop() { return "."; }
std::string mark() { return "("; }
std::string none() { return "N"; }
std::string long1(int64_t value) {
  std::string bytes = "\x8a\x08";
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>(static_cast<uint64_t>(value) >> (8 * i));
  return bytes;
}
std::string text(const std::string& s) { return "X" + u32(static_cast<uint32_t>(s.size())) + s; }
std::string global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
std::string put(uint32_t id) { return "r" + u32(id); }
std::string get(uint32_t id) { return "j" + u32(id); }
std::string ints(const std::vector<int64_t>& values) {
  std::string bytes = mark();
  for (const int64_t v : values) bytes += long1(v);
  return bytes + "t";
}

// A call of _rebuild_tensor_v2 on a float storage in record data/0.
std::string tensor(int64_t storage_elements, int64_t offset, const std::vector<int64_t>& sizes,
                   const std::vector<int64_t>& strides) {
  const std::string storage = mark() + text("storage") + global("torch", "FloatStorage") +
                              text("0") + text("cpu") + long1(storage_elements) + "t" + "Q";
  const std::string hooks = global("collections", "OrderedDict") + ")" + "R";
  return global("torch._utils", "_rebuild_tensor_v2") + mark() + storage + long1(offset) +
         ints(sizes) + ints(strides) + "\x89" + hooks + "t" + "R";
}

// An archive of `records` (name, bytes), as LibTorch's writer lays it out.
std::string archive_with(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string archive;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      archive.append(static_cast<const char*>(data), size);
      return size;
    });
    for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
  }  // the writer's destructor writes the archive's end
  return archive;
}

// An archive laid out as torch.save lays it out: `pickle` as data.pkl, and
// each of `storages` as data/<its index>.
std::string archive_of(const std::string& pickle, const std::vector<std::string>& storages = {}) {
  std::vector<std::pair<std::string, std::string>> records = {{"data.pkl", pickle}};
  for (size_t i = 0; i < storages.size(); ++i) {
    records.emplace_back("data/" + std::to_string(i), storages[i]);
  }
  return archive_with(records);
}

std::string floats(int count) { return std::string(4 * static_cast<size_t>(count), '\0'); }

std::string pickled(const c10::IValue& value) {
  const at::Tensor bytes = pickle(value);
  return {static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel())};
}

c10::IValue unpickled(std::string archive) {
  return unpickle(at::from_blob(archive.data(), {static_cast<int64_t>(archive.size())}, at::kByte),
                  "the frame of rank 2");
}

// The check's message for `archive`, or "" when it passes.
std::string refusal(const std::string& archive) {
  try {
    check_pickle_archive(archive, "the frame of rank 2");
  } catch (const MalformedInput& error) {
    return error.what();
  }
  return "";
}

#define EXPECT_REFUSED(archive, words)                                            \
  do {                                                                            \
    const std::string message = refusal(archive);                                 \
    EXPECT_NE(message.find("the frame of rank 2"), std::string::npos) << message; \
    EXPECT_NE(message.find(words), std::string::npos) << "[" << message << "]";   \
  } while (false)

c10::IValue every_kind_of_value() {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("ints", c10::List<int64_t>({1, 300000, -5, int64_t{1} << 40}));
  dict.insert("doubles", c10::List<double>({1.5}));
  dict.insert("bools", c10::List<bool>({true}));
  dict.insert("tensor", at::arange(6, at::kFloat).view({2, 3}).requires_grad_(true));
  dict.insert("tensors", c10::List<at::Tensor>({at::ones({2}), at::ones({0})}));
  dict.insert("tuple", c10::ivalue::Tuple::create({1, "s", 2.5, c10::IValue(), true}));
  c10::impl::GenericDict inner(c10::IntType::get(), c10::AnyType::get());
  inner.insert(0, at::ones({3}, at::kLong));
  dict.insert("inner", inner);
  dict.insert("half", at::ones({2}, at::kHalf));
  dict.insert("bfloat16", at::ones({2}, at::kBFloat16));
  dict.insert("bool", at::ones({2}, at::kBool));
  dict.insert("view", at::arange(10).slice(0, 2, 8, 2));
  dict.insert("empty view", at::arange(10).slice(0, 3, 3));
  return dict;
}

TEST(PickleBounds, EverythingTheEnginesPicklersWritePasses) {
  const c10::IValue value = every_kind_of_value();
  EXPECT_EQ(refusal(pickled(value)), "");
  const at::Tensor untagged = pickle_untagged(value);
  EXPECT_EQ(refusal({static_cast<const char*>(untagged.data_ptr()),
                     static_cast<size_t>(untagged.numel())}),
            "");
}

TEST(PickleBounds, AHandWrittenTensorWithinItsStoragePassesAndLoads) {
  const std::string archive =
      archive_of(proto() + tensor(6, 1, {2, 2}, {2, 1}) + stop(), {floats(6)});
  ASSERT_EQ(refusal(archive), "");
  const at::Tensor loaded = unpickled(archive).toTensor();
  EXPECT_EQ(loaded.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(loaded.storage_offset(), 1);
}

TEST(PickleBounds, GlobalsTheEngineDoesNotWriteAreRefusedByName) {
  for (const auto& [module, name] : std::vector<std::pair<std::string, std::string>>{
           {"os", "system"},
           {"builtins", "eval"},
           {"__builtin__", "getattr"},
           {"torch.jit._pickle", "build_tensor_from_id"},
           {"torch._utils", "_rebuild_parameter"},
           {"__torch__", "Module"}}) {
    EXPECT_REFUSED(archive_of(proto() + global(module, name) + ")R" + stop()),
                   "global " + module + "." + name + " is not one the engine writes");
  }
  EXPECT_EQ(refusal(archive_of(proto() + global("collections", "OrderedDict") + ")R" + stop())),
            "");
}

TEST(PickleBounds, AStorageMustFillItsRecordExactly) {
  EXPECT_REFUSED(archive_of(proto() + tensor(1000, 0, {4}, {1}) + stop(), {floats(4)}),
                 "a storage of 1000 elements of 4 bytes in record data/0, which holds 16 bytes");
  EXPECT_REFUSED(archive_of(proto() + tensor(3, 0, {3}, {1}) + stop(), {floats(4)}),
                 "a storage of 3 elements");
  EXPECT_REFUSED(archive_of(proto() + tensor(4, 0, {4}, {1}) + stop()),
                 "a storage in record data/0, which the archive lacks");
}

TEST(PickleBounds, ATensorMustLieInsideItsStorage) {
  const std::string past_its_storage = "a tensor reaches past its storage";
  const auto archive = [](int64_t offset, std::vector<int64_t> sizes,
                          std::vector<int64_t> strides) {
    return archive_of(proto() + tensor(4, offset, sizes, strides) + stop(), {floats(4)});
  };
  EXPECT_EQ(refusal(archive(0, {4}, {1})), "");
  EXPECT_EQ(refusal(archive(3, {1}, {1})), "");
  EXPECT_EQ(refusal(archive(0, {2, 2}, {2, 1})), "");
  EXPECT_EQ(refusal(archive(7, {0, int64_t{1} << 62}, {1, 1})), "");  // no elements
  EXPECT_REFUSED(archive(0, {5}, {1}), past_its_storage);
  EXPECT_REFUSED(archive(1, {4}, {1}), past_its_storage);
  EXPECT_REFUSED(archive(0, {2, 2}, {3, 1}), past_its_storage);
  EXPECT_REFUSED(archive(0, {8}, {0}),
                 past_its_storage);  // expanded: more elements than its storage
  EXPECT_REFUSED(archive(0, {int64_t{1} << 62, 4}, {1, int64_t{1} << 62}), past_its_storage);
  EXPECT_REFUSED(archive(-1, {1}, {1}), past_its_storage);
  EXPECT_REFUSED(archive(0, {2}, {-1}), "sizes and strides must be ints of at least 0");
  EXPECT_REFUSED(archive(0, {2, 2}, {1}), "a tensor's strides has 1 items where 2 are due");
}

TEST(PickleBounds, MemoIdsAreWrittenInOrderAndReadOnceWritten) {
  EXPECT_EQ(refusal(archive_of(proto() + none() + put(0) + get(0) + "\x86" + stop())), "");
  // LibTorch's unpickler would reserve 2^32 memo slots for this id.
  EXPECT_REFUSED(archive_of(proto() + none() + put(0x80000000u) + stop()),
                 "memo id 2147483648 where the next one is 0");
  EXPECT_REFUSED(archive_of(proto() + none() + put(0) + get(1) + "\x86" + stop()),
                 "memo id 1 read before it was written (1 written)");
}

TEST(PickleBounds, TheStackNeverUnderflowsAndEndsWithOneValue) {
  const std::string underflow = "stack underflow";
  EXPECT_REFUSED(archive_of(proto() + "R" + stop()), underflow);
  EXPECT_REFUSED(archive_of(proto() + none() + "\x86" + stop()), underflow);
  EXPECT_REFUSED(archive_of(proto() + "]" + mark() + "a" + stop()), underflow);  // below a mark
  EXPECT_REFUSED(archive_of(proto() + none() + "e" + stop()), "no mark to close");
  EXPECT_REFUSED(archive_of(proto() + stop()), "STOP with 0 values and 0 open marks");
  EXPECT_REFUSED(archive_of(proto() + none() + none() + stop()), "STOP with 2 values");
  EXPECT_REFUSED(archive_of(proto() + mark() + none() + stop()), "and 1 open marks");
  EXPECT_REFUSED(archive_of(proto() + none()), "asks for 1 bytes where 0 are left");
  EXPECT_REFUSED(archive_of(proto() + none() + stop() + none()), "1 bytes follow its STOP");
  EXPECT_REFUSED(archive_of(proto() + "}" + mark() + none() + "u" + stop()),
                 "SETITEMS with a key and no value");
  EXPECT_REFUSED(archive_of(proto() + "]" + none() + none() + "s" + stop()),
                 "adds items to a list as if it were a dict");
}

// `depth` lists, each the only item of the one before.
std::string nested_lists(size_t depth) {
  std::string pickle = proto();
  pickle += "]";
  for (size_t i = 1; i < depth; ++i) pickle += mark() + "]";
  for (size_t i = 1; i < depth; ++i) pickle += "e";
  return archive_of(pickle + stop());
}

TEST(PickleBounds, NestingStopsAtItsLimitAndTheLimitLoads) {
  EXPECT_EQ(refusal(nested_lists(kMaxPickleNesting)), "");
  EXPECT_NO_THROW(unpickled(nested_lists(kMaxPickleNesting)));
  EXPECT_REFUSED(nested_lists(kMaxPickleNesting + 1),
                 "containers nest deeper than " + std::to_string(kMaxPickleNesting));
  const std::string tag = std::string(kMaxPickleNesting + 1, '[');
  EXPECT_REFUSED(archive_of(proto() + global("torch.jit._pickle", "restore_type_tag") + mark() +
                            "]" + text(tag) + "t" + "R" + stop()),
                 "a type tag nested deeper than");
}

TEST(PickleBounds, NoContainerContainsItselfOrChangesOnceInsideAnother) {
  EXPECT_REFUSED(archive_of(proto() + "]" + put(0) + get(0) + "a" + stop()),
                 "a list contains itself");
  // [L] is built, then L (now inside it) is appended to.
  EXPECT_REFUSED(archive_of(proto() + "]" + put(0) + "]" + get(0) + "a" + get(0) + none() + "a" +
                            "\x86" + stop()),
                 "changes a list already inside another value");
}

TEST(PickleBounds, ValuesCountOncePerReferenceWithinTheBudget) {
  // Each tuple holds the one before twice: 2^levels references in as many
  // memo lookups as levels.
  const auto doubling = [](uint32_t levels) {
    std::string pickle = proto() + "]" + none() + "a" + put(0);
    for (uint32_t i = 0; i < levels; ++i) pickle += get(i) + "\x86" + put(i + 1);
    return archive_of(pickle + stop());
  };
  EXPECT_EQ(refusal(doubling(10)), "");
  EXPECT_REFUSED(doubling(25), "it builds more than 1048576 values");
}

TEST(PickleBounds, LengthsMustFitInTheBytesLeft) {
  EXPECT_REFUSED(archive_of(proto() + "X" + u32(0xFFFFFFFFu) + "abc" + stop()),
                 "asks for 4294967295 bytes where 4 are left");
  EXPECT_REFUSED(archive_of(proto() + "cos\nsys"), "a GLOBAL's name has no end");
}

TEST(PickleBounds, OpcodesThatBuildObjectsAndOtherProtocolsAreRefused) {
  EXPECT_REFUSED(archive_of(proto() + "}" + "}" + "b" + stop()), "opcode 0x62");           // BUILD
  EXPECT_REFUSED(archive_of(proto() + mark() + "ios\nsystem\n" + stop()), "opcode 0x69");  // INST
  EXPECT_REFUSED(archive_of(proto() + mark() + "o" + stop()), "opcode 0x6f");              // OBJ
  EXPECT_REFUSED(archive_of("\x80\x04" + none() + stop()), "pickle protocol 4");
  EXPECT_REFUSED(archive_of(proto() + "\x8a\x09" + std::string(9, '\1') + stop()),
                 "an int of 9 bytes");
}

// The offset of the central directory entry of the record named `name`.
size_t directory_entry(const std::string& archive, const std::string& name) {
  for (size_t at = archive.find("PK\x01\x02"); at != std::string::npos;
       at = archive.find("PK\x01\x02", at + 1)) {
    uint16_t name_bytes = 0;
    std::memcpy(&name_bytes, archive.data() + at + 28, 2);
    if (archive.compare(at + 46, name_bytes, "archive/" + name) == 0) return at;
  }
  ADD_FAILURE() << "no entry for " << name;
  return 0;
}

std::string with_field(std::string archive, size_t at, uint32_t value, size_t bytes) {
  std::memcpy(archive.data() + at, &value, bytes);
  return archive;
}

TEST(PickleBounds, ZipRecordsMustLieInsideTheArchive) {
  const std::string archive = pickled(every_kind_of_value());
  ASSERT_EQ(refusal(archive), "");
  const size_t entry = directory_entry(archive, "data/0");
  // A record that claims 4 GiB: caffe2's reader would allocate it before reading.
  std::string huge = with_field(archive, entry + 20, 0xFFFFFFF0u, 4);
  huge = with_field(huge, entry + 24, 0xFFFFFFF0u, 4);
  EXPECT_REFUSED(huge, "record archive/data/0 declares 4294967280 bytes at byte");
  EXPECT_REFUSED(with_field(archive, entry + 24, 0xFFFFFFF0u, 4),
                 "declares 4294967280 bytes and 24 stored bytes");
  EXPECT_REFUSED(with_field(archive, entry + 10, 8, 2), "record archive/data/0 is compressed");
  // Found by tools/fuzz: miniz reads nothing from a folder's record.
  EXPECT_REFUSED(with_field(archive, entry + 38, 0x10, 4),
                 "record archive/data/0 is marked a folder");
  EXPECT_REFUSED(with_field(archive, entry + 8, 1, 2), "record archive/data/0 is encrypted");
  EXPECT_REFUSED(with_field(archive, entry + 42, 3, 4), "has no local header at byte 3");
  EXPECT_REFUSED(archive.substr(0, archive.size() - 10), "no end-of-central-directory record");
  EXPECT_REFUSED(std::string(16, '\7'), "no end-of-central-directory record");
  // LibTorch's writer ends every archive with zip64 records, which readers
  // take their counts from.
  const size_t end = archive.rfind("PK\x06\x06");
  ASSERT_NE(end, std::string::npos);
  EXPECT_REFUSED(with_field(with_field(archive, end + 24, 60000, 4), end + 32, 60000, 4),
                 "60000 records declared in a");
  uint32_t records = 0;  // 11 from LibTorch 1.13's writer, 13 from 2.x's
  std::memcpy(&records, archive.data() + end + 24, 4);
  EXPECT_REFUSED(with_field(archive, end + 32, 60000, 4),
                 "60000 records in all and " + std::to_string(records) + " on this disk");
  EXPECT_REFUSED(with_field(archive, end + 48, 0x7FFFFFFFu, 4), "runs past its end record");
  // A record named in another case is the same record to miniz.
  std::string twice = archive;
  twice.replace(directory_entry(archive, "data/1") + 46 + 8, 6, "DATA/0");
  EXPECT_REFUSED(twice, "two records are named archive/data/0");
}

// Where the bytes of the record named `name` start.
size_t record_data(const std::string& archive, const std::string& name) {
  uint32_t local = 0;
  uint16_t name_bytes = 0;
  uint16_t extra_bytes = 0;
  std::memcpy(&local, archive.data() + directory_entry(archive, name) + 42, 4);
  std::memcpy(&name_bytes, archive.data() + local + 26, 2);
  std::memcpy(&extra_bytes, archive.data() + local + 28, 2);
  return local + 30 + name_bytes + extra_bytes;
}

// Found by tools/fuzz: PyTorchStreamReader's constructor throws on these,
// and leaks its zip reader's state when it does.
TEST(PickleBounds, TheFormatVersionIsOneThatLibTorchReads) {
  const std::string archive = archive_of(proto() + none() + stop());
  ASSERT_EQ(refusal(archive), "");
  std::string renamed = archive;
  renamed.replace(directory_entry(archive, "version") + 46 + 8, 7, "notthat");
  EXPECT_REFUSED(renamed, "it has no version record");
  const size_t version = record_data(archive, "version");
  for (const std::string& bad :
       {std::string("E\n"), std::string("0\n"), std::string("99"), std::string(2, '\0')}) {
    EXPECT_REFUSED(std::string(archive).replace(version, 2, bad), "format version");
  }
  EXPECT_EQ(refusal(std::string(archive).replace(version, 2, "10")), "");
}

TEST(PickleBounds, AnArchiveWithoutAPickleIsRefused) {
  EXPECT_REFUSED(archive_with({{"other", "x"}}), "it has no data.pkl record");
}

// Whatever bytes of a valid archive are overwritten, unpickling gives the
// value or a MalformedInput: never another error, a crash or a hang.
RC_GTEST_PROP(PickleBounds, OverwrittenBytesGiveAValueOrMalformedInput, ()) {
  static const std::string archive = pickled(every_kind_of_value());
  std::string damaged = archive;
  const auto writes = *rc::gen::inRange(1, 9);
  for (int i = 0; i < writes; ++i) {
    const auto at = *rc::gen::inRange<size_t>(0, damaged.size());
    damaged[at] = *rc::gen::arbitrary<char>();
  }
  try {
    unpickled(damaged);
  } catch (const MalformedInput&) {
  }
}

}  // namespace
}  // namespace engine::dist
