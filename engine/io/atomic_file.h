#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/io/file_system.h"

namespace engine::io {

// The disk refused a write. The message starts with the file's path.
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes the concatenation of `pieces` to `path` so that `path` holds either
// its old content or the whole new file, never a torn one: a temporary file in
// the same folder (created with its parents; a name no other write uses, so
// that writers of one path at once, threads or processes, each leave a whole
// file and the last one wins), fsync'ed, renamed over `path`,
// then the folder fsync'ed. When it returns, the new file is durable (unless
// the file system cannot sync folders at all, EINVAL). Throws FileError if the
// disk refuses (the message names `path`, the step and the system's error);
// the temporary file is removed then, and `path` holds the old file, or the
// new one when only the folder's sync failed. `fs` is where the
// file operations go (tests put a crashing one there).
void write_atomically(const std::string& path, const std::vector<std::string_view>& pieces,
                      FileSystem& fs = posix_file_system());

}  // namespace engine::io
