#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace engine::io {

// The disk refused a write. The message starts with the file's path.
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Test seam: runs after the temporary file is complete and synced, before
// it is renamed to its final name.
using BeforeRename = std::function<void(const std::string& temporary_path)>;

// Writes the concatenation of `pieces` to `path` so that `path` holds either
// its old content or the whole new file, never a torn one: a temporary file in
// the same folder (created with its parents), fsync'ed, renamed over `path`,
// then the folder fsync'ed. Throws FileError if the disk refuses; the
// temporary file is removed then.
void write_atomically(const std::string& path, const std::vector<std::string_view>& pieces,
                      const BeforeRename& before_rename = {});

}  // namespace engine::io
