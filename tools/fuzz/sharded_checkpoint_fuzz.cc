// libFuzzer target: a sharded checkpoint's files (the input's format is
// sharded_input.h's), written into a directory and read by load_sharded as
// rank 0 of 2 holds the model, resharding from whatever world size the
// index states. Each file goes through load_file: the envelope, the zip
// and the pickle, then the index's and the rank files' entries. A load or
// CheckpointError is fine; any other exception, a crash, a leak or a
// sanitizer report is a bug.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "engine/checkpoint/file.h"
#include "engine/checkpoint/sharded/sharded_checkpoint.h"
#include "tools/fuzz/sharded_input.h"

namespace {

const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "sharded_fuzz.XXXXXX").string();
    if (!mkdtemp(pattern.data())) std::abort();
    return pattern;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = scratch_dir();
  fuzz::write_files(dir,
                    fuzz::split_files(std::string_view(reinterpret_cast<const char*>(data), size)));
  auto mine = fuzz::model_state(0, 2);
  try {
    engine::checkpoint::load_sharded(dir, mine);
  } catch (const engine::checkpoint::CheckpointError&) {
  }
  return 0;
}
