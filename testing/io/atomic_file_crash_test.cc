// A crash at every step of an atomic write, on a file system that keeps only
// what was made durable (crash_file_system.h): the final name holds the old
// file or the new one, whole, and the new one once the write has returned.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint/file.h"
#include "engine/io/atomic_file.h"
#include "testing/io/crash_file_system.h"

namespace {

using crash_fs::CrashFileSystem;
using Pieces = std::vector<std::string_view>;
using Save = std::function<void(engine::io::FileSystem&)>;

const std::string kPath = "run/latest.pth";
const std::string kOld = "the old checkpoint, whole";

std::string joined(const Pieces& pieces) {
  std::string all;
  for (const auto piece : pieces) all.append(piece);
  return all;
}

// A file system holding the old file (or nothing) under kPath.
CrashFileSystem starting_with(const std::optional<std::string>& old) {
  CrashFileSystem fs;
  if (old) fs.put(kPath, *old);
  return fs;
}

struct DryRun {
  std::string written;
  int steps = 0;
};

DryRun dry_run(const Save& save, const std::optional<std::string>& old) {
  CrashFileSystem fs = starting_with(old);
  save(fs);
  return DryRun{fs.read(kPath).value_or("<absent>"), fs.steps()};
}

// Crashes `save` at each of its steps, and once more after it returned.
void expect_old_or_new_after_every_crash(const Save& save, const std::optional<std::string>& old) {
  const DryRun dry = dry_run(save, old);
  bool saw_old = false, saw_new = false;
  for (int step = 0; step <= dry.steps; ++step) {
    SCOPED_TRACE("crash at step " + std::to_string(step) + " of " + std::to_string(dry.steps) +
                 (old ? ", over an old file" : ", no old file"));
    CrashFileSystem fs = starting_with(old);
    fs.crash_at(step);
    try {
      save(fs);
    } catch (const std::exception&) {
      // The machine died in the middle: no one hears of it.
    }
    fs.crash();
    const std::optional<std::string> after = fs.read(kPath);
    // A crash at a step the save took killed it; the last is after it returned.
    const bool returned = step == dry.steps;
    if (returned) {
      EXPECT_EQ(after, dry.written) << "the write returned, so the new file must be durable";
    } else {
      EXPECT_TRUE(after == old || after == dry.written)
          << "torn or lost: " << (after ? "\"" + *after + "\"" : "no file");
    }
    saw_old |= after == old;
    saw_new |= after == dry.written;
  }
  // Both outcomes occur: the crash points span the whole write.
  EXPECT_TRUE(saw_new);
  EXPECT_TRUE(saw_old);
}

Save write_pieces(const Pieces& pieces) {
  return [pieces](engine::io::FileSystem& fs) { engine::io::write_atomically(kPath, pieces, fs); };
}

TEST(AtomicFileCrash, EveryCrashLeavesTheOldFileOrTheWholeNewOne) {
  const std::vector<Pieces> shapes{
      {"header|", "payload of the new checkpoint"}, {"x"}, {}, {"", ""}};
  for (const auto& pieces : shapes) {
    SCOPED_TRACE("new file \"" + joined(pieces) + "\"");
    ASSERT_EQ(dry_run(write_pieces(pieces), kOld).written, joined(pieces));
    expect_old_or_new_after_every_crash(write_pieces(pieces), kOld);
    expect_old_or_new_after_every_crash(write_pieces(pieces), std::nullopt);
  }
}

TEST(AtomicFileCrash, AStepThatFailsLeavesTheOldFileAndNoTemporaryOne) {
  const Pieces pieces{"new ", "content"};
  for (const std::optional<std::string>& old :
       {std::optional<std::string>(kOld), std::optional<std::string>()}) {
    const DryRun dry = dry_run(write_pieces(pieces), old);
    for (int step = 0; step < dry.steps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step) + " fails with ENOSPC");
      CrashFileSystem fs = starting_with(old);
      fs.fail_at(step, ENOSPC);
      try {
        engine::io::write_atomically(kPath, pieces, fs);
        ADD_FAILURE() << "a failed step must be reported";
      } catch (const engine::io::FileError& error) {
        const std::string message = error.what();
        EXPECT_EQ(message.rfind(kPath + ": ", 0), 0u) << message;
        EXPECT_NE(message.find(std::strerror(ENOSPC)), std::string::npos) << message;
      }
      const std::optional<std::string> after = fs.read(kPath);
      EXPECT_TRUE(after == old || after == joined(pieces));
      const std::vector<std::string> expected =
          after ? std::vector<std::string>{kPath} : std::vector<std::string>{};
      EXPECT_EQ(fs.names(), expected) << "a temporary file was left behind";
    }
  }
}

TEST(AtomicFileCrash, AFileSystemThatCannotSyncFoldersIsNoError) {
  CrashFileSystem fs;
  const int steps = dry_run(write_pieces({"new"}), std::nullopt).steps;
  fs.fail_at(steps - 1, EINVAL);
  engine::io::write_atomically(kPath, {"new"}, fs);
  EXPECT_EQ(fs.read(kPath), "new");
}

TEST(AtomicFileCrash, ACheckpointFileIsTheOldOrTheNewAfterEveryCrash) {
  const c10::IValue content(std::vector<int64_t>{1, 2, 3, 5, 8});
  const Save save = [&](engine::io::FileSystem& fs) {
    engine::checkpoint::save_file(kPath, content, fs);
  };
  ASSERT_GT(dry_run(save, kOld).written.size(), 16u);
  expect_old_or_new_after_every_crash(save, kOld);
}

}  // namespace
