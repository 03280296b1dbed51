#pragma once

#include <ATen/core/ivalue.h>

#include <string>

#include "engine/dist/errors.h"
#include "engine/io/atomic_file.h"

// Checkpoint files, written atomically: LibTorch's pickle of the content
// (dist::pickle_untagged), which is torch.save's format (a zip archive),
// followed by a small envelope
// (magic, format version, payload size, CRC-32) that is the archive's
// comment. So torch.load reads every checkpoint the engine writes
// (weights_only=True included, for content of tensors, containers, numbers
// and strings), and the engine reads files written by torch.save (without
// the envelope's checks) and by its own format version 1 (the envelope
// first).
namespace engine::checkpoint {

// A checkpoint file that cannot be read: missing, not a checkpoint,
// truncated, corrupt. The message names the file and what is wrong.
class CheckpointError : public dist::DistError {
 public:
  using dist::DistError::DistError;
};

// Writes `content` to `path` so that `path` holds either its old content or
// the whole new file, never a torn one: a temporary file in the same folder,
// flushed and fsync'ed, renamed over `path`, then the folder fsync'ed.
// Throws CheckpointError if the disk refuses (the temporary file is removed).
// `fs`: see io::write_atomically. Under a DeferredSaves
// (deferred_saves.h), a copy of `content` is queued instead.
void save_file(const std::string& path, const c10::IValue& content,
               io::FileSystem& fs = io::posix_file_system());

// Reads and verifies a file written by save_file (or by version 1 of it), or
// reads a torch.save file.
c10::IValue load_file(const std::string& path);

}  // namespace engine::checkpoint
