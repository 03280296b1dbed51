#include "tools/launch/temporary_folder.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "engine/io/file_system.h"

namespace launch {

TemporaryFolder::TemporaryFolder(const std::string& parent, const std::string& what) {
  std::string pattern = parent + "/engine-launch-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("engine-launch: cannot make a folder for " + what + " under " +
                             parent);
  path_ = pattern;
}

TemporaryFolder::~TemporaryFolder() {
  if (keep_) return;
  std::error_code ignored;
  engine::io::remove_all(path_, ignored);
}

std::string temporary_parent() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

std::string memory_parent() {
  std::error_code error;
  return std::filesystem::is_directory("/dev/shm", error) ? "/dev/shm" : temporary_parent();
}

}  // namespace launch
