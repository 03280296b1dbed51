#pragma once

#include <string>

namespace launch {

// A folder of the launcher's own, made under `parent` (mkdtemp) and removed
// with everything in it when destroyed, unless kept.
class TemporaryFolder {
 public:
  // `what` names it in the error when it cannot be made.
  TemporaryFolder(const std::string& parent, const std::string& what);
  ~TemporaryFolder();
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;

  const std::string& path() const { return path_; }
  void keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

// $TMPDIR when set, else /tmp.
std::string temporary_parent();
// /dev/shm (memory) when it is a folder, else temporary_parent().
std::string memory_parent();

}  // namespace launch
