// engine::io::remove_all keeps std::filesystem::remove_all's contract
// (engine/io/file_system.h): a tree goes whole, a symbolic link goes without
// what it points to, a missing path is no error, a failure names the path.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "engine/io/file_system.h"

namespace {

namespace fs = std::filesystem;
using engine::io::remove_all;

fs::path empty_folder(const std::string& name) {
  const fs::path folder = fs::path(::testing::TempDir()) / name;
  remove_all(folder.string());
  fs::create_directories(folder);
  return folder;
}

void write(const fs::path& path) { std::ofstream(path) << path.filename().string(); }

TEST(RemoveAll, RemovesANestedTreeWithItsFilesAndEmptyFolders) {
  const fs::path tree = empty_folder("nested") / "tree";
  fs::create_directories(tree / "a" / "b" / "c");
  fs::create_directories(tree / "empty");
  write(tree / "top.bin");
  write(tree / "a" / "b" / "c" / "deep.bin");
  remove_all(tree.string());
  EXPECT_FALSE(fs::exists(tree));
  EXPECT_TRUE(fs::exists(tree.parent_path()));
}

TEST(RemoveAll, RemovesASingleFile) {
  const fs::path file = empty_folder("file") / "one.bin";
  write(file);
  remove_all(file.string());
  EXPECT_FALSE(fs::exists(file));
}

TEST(RemoveAll, RemovesALinkButNotWhatItPointsTo) {
  const fs::path folder = empty_folder("links");
  fs::create_directories(folder / "kept");
  write(folder / "kept" / "data.bin");
  fs::create_directories(folder / "tree");
  fs::create_directory_symlink(folder / "kept", folder / "tree" / "link");
  remove_all((folder / "tree").string());
  EXPECT_FALSE(fs::exists(folder / "tree"));
  EXPECT_TRUE(fs::exists(folder / "kept" / "data.bin"));
}

TEST(RemoveAll, AMissingPathIsNoError) {
  const fs::path missing = empty_folder("missing") / "never" / "made";
  std::error_code error = std::make_error_code(std::errc::io_error);
  remove_all(missing.string(), error);
  EXPECT_FALSE(error);
  EXPECT_NO_THROW(remove_all(missing.string()));
}

TEST(RemoveAll, APathItCannotLookAtIsAnErrorNamingIt) {
  const std::string too_long = (empty_folder("too_long") / std::string(300, 'x')).string();
  std::error_code error;
  remove_all(too_long, error);
  EXPECT_EQ(error, std::errc::filename_too_long);
  try {
    remove_all(too_long);
    ADD_FAILURE() << "expected a std::system_error";
  } catch (const std::system_error& thrown) {
    EXPECT_NE(std::string(thrown.what()).find(too_long), std::string::npos) << thrown.what();
  }
}

TEST(RemoveAll, AFolderItCannotEmptyIsAnErrorAndKeepsItsFiles) {
  if (geteuid() == 0) GTEST_SKIP() << "root may remove from a read-only folder";
  const fs::path tree = empty_folder("read_only") / "tree";
  fs::create_directories(tree / "locked");
  write(tree / "locked" / "data.bin");
  fs::permissions(tree / "locked", fs::perms::owner_read | fs::perms::owner_exec);
  std::error_code error;
  remove_all(tree.string(), error);
  EXPECT_EQ(error, std::errc::permission_denied);
  EXPECT_TRUE(fs::exists(tree / "locked" / "data.bin"));
  fs::permissions(tree / "locked", fs::perms::owner_all);
}

}  // namespace
