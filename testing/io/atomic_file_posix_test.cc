// write_atomically on the real file system, with what earlier runs and other
// writers leave there: a stale temporary file, an existing target, a folder
// it may not write in, a folder that is a file, and several writers of one
// path at once in one process (the simulator's ranks are threads of one).
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "engine/io/atomic_file.h"

namespace {

namespace fs = std::filesystem;
using engine::io::FileError;
using engine::io::write_atomically;

fs::path fresh_folder(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const fs::path folder = fs::path(root ? root : "/tmp") / name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put(const fs::path& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

std::vector<std::string> names_in(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(AtomicFilePosix, AStaleTemporaryFileIsNeverWhatTheTargetGets) {
  const fs::path folder = fresh_folder("stale");
  const fs::path target = folder / "latest.pth";
  // What a crashed run with this process's pid left, longer than the new file.
  const std::string stale = "latest.pth.tmp." + std::to_string(getpid());
  put(folder / stale, std::string(4096, 's'));
  write_atomically(target, {"new"});
  EXPECT_EQ(read(target), "new");
  for (const auto& name : names_in(folder)) {
    EXPECT_TRUE(name == "latest.pth" || name == stale) << "the write left " << name;
  }
}

TEST(AtomicFilePosix, AnExistingLongerTargetIsReplacedWhole) {
  const fs::path folder = fresh_folder("existing");
  const fs::path target = folder / "latest.pth";
  put(target, std::string(4096, 'o'));
  write_atomically(target, {"new ", "file"});
  EXPECT_EQ(read(target), "new file");
  EXPECT_EQ(names_in(folder), std::vector<std::string>{"latest.pth"});
}

TEST(AtomicFilePosix, AFolderThatIsAFileIsAnErrorNamingThePath) {
  const fs::path folder = fresh_folder("not_a_folder");
  put(folder / "blocker", "kept");
  const std::string path = (folder / "blocker" / "run" / "latest.pth").string();
  try {
    write_atomically(path, {"new"});
    FAIL() << "wrote under a file";
  } catch (const FileError& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind(path + ": cannot create its folder: ", 0), 0u) << message;
  }
  EXPECT_EQ(read(folder / "blocker"), "kept");
  EXPECT_EQ(names_in(folder), std::vector<std::string>{"blocker"});
}

// In a child process without the capabilities that let root write anywhere
// (CAP_DAC_OVERRIDE and its kin), so that the folder's mode binds it as it
// binds any user. Exit 0: the error was as it must be.
TEST(AtomicFilePosix, AFolderItMayNotWriteInLeavesTheOldFileAndNoTemporaryOne) {
  const fs::path folder = fresh_folder("read_only");
  const fs::path target = folder / "latest.pth";
  put(target, "old");
  fs::permissions(folder, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                              fs::perms::group_exec | fs::perms::others_read |
                              fs::perms::others_exec);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    if (syscall(SYS_capget, &header, caps) != 0) _exit(2);
    for (const int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER})
      caps[cap / 32].effective &= ~(1u << (cap % 32));
    if (syscall(SYS_capset, &header, caps) != 0) _exit(2);
    try {
      write_atomically(target, {"new"});
      _exit(3);
    } catch (const FileError& error) {
      const std::string message = error.what();
      const bool named = message.rfind(target.string() + ": ", 0) == 0 &&
                         message.find(std::strerror(EACCES)) != std::string::npos;
      _exit(named ? 0 : 4);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  fs::permissions(folder, fs::perms::owner_all);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "2: could not drop the capabilities; 3: wrote in a read-only "
         "folder; 4: the error did not name the path and EACCES";
  EXPECT_EQ(read(target), "old");
  EXPECT_EQ(names_in(folder), std::vector<std::string>{"latest.pth"});
}

// Each thread writes its own content, of its own length, many times: the
// file is always one of them whole, and every write succeeds.
TEST(AtomicFilePosix, WritersOfOnePathAtOnceEachLeaveAWholeFile) {
  const fs::path folder = fresh_folder("writers");
  const fs::path target = folder / "config.json";
  constexpr int kWriters = 4;
  constexpr int kWrites = 200;
  std::vector<std::string> contents;
  for (int w = 0; w < kWriters; ++w) contents.push_back(std::string(1000 * (w + 1), 'a' + w));
  std::vector<std::string> failures(kWriters);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kWrites && failures[w].empty(); ++i) {
        try {
          write_atomically(target, {contents[w]});
        } catch (const FileError& error) {
          failures[w] = error.what();
        }
        const std::string now = read(target);
        if (std::find(contents.begin(), contents.end(), now) == contents.end())
          failures[w] = "read a torn file of " + std::to_string(now.size()) + " bytes";
      }
    });
  }
  for (auto& writer : writers) writer.join();
  for (int w = 0; w < kWriters; ++w) EXPECT_EQ(failures[w], "") << "writer " << w;
  EXPECT_EQ(names_in(folder), std::vector<std::string>{"config.json"});
}

}  // namespace
