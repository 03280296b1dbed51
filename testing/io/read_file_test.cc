// engine::io::read_file (engine/io/file_system.h): every byte of a file,
// and an error naming the path and the reason when it cannot be read.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "engine/io/file_system.h"

namespace {

namespace fs = std::filesystem;
using engine::io::read_file;

fs::path written(const std::string& name, const std::string& content) {
  const fs::path path = fs::path(::testing::TempDir()) / name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// What read_file(path) threw; fails the test when it threw nothing.
std::string error_reading(const fs::path& path) {
  try {
    read_file(path.string());
  } catch (const std::runtime_error& thrown) {
    return thrown.what();
  }
  ADD_FAILURE() << "expected " << path << " to be unreadable";
  return "";
}

TEST(ReadFile, ReturnsEveryByteOfAFileOfAnySize) {
  std::string every_byte;
  for (int i = 0; i < 256; ++i) every_byte.push_back(static_cast<char>(i));
  std::string large;
  for (int i = 0; i < (3 << 20) + 5; ++i) large.push_back(static_cast<char>(i * 7 + i / 251));
  for (const std::string& content : {std::string(), every_byte, large}) {
    EXPECT_EQ(read_file(written("read_" + std::to_string(content.size()), content).string()),
              content);
  }
}

TEST(ReadFile, AMissingFileOrAFolderIsAnErrorNamingThePathAndTheReason) {
  const fs::path missing = fs::path(::testing::TempDir()) / "no_such_file";
  const std::string absent = error_reading(missing);
  EXPECT_NE(absent.find(missing.string() + ": cannot be read: No such file or directory"),
            std::string::npos)
      << absent;
  const fs::path folder = fs::path(::testing::TempDir()) / "a_folder";
  fs::create_directories(folder);
  const std::string is_folder = error_reading(folder);
  EXPECT_NE(is_folder.find(folder.string() + ": cannot be read: Is a directory"), std::string::npos)
      << is_folder;
}

}  // namespace
