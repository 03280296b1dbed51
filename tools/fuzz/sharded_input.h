#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint/sharded/sharded_checkpoint.h"

// The input of sharded_checkpoint_fuzz, shared with the test that keeps its
// seed loadable (sharded_seed_test.cc): a sharded checkpoint's files joined
// into one input, in the order kFileNames lists them, each followed by the
// line kFileEnd.
namespace fuzz {

inline constexpr std::string_view kFileEnd = "\n--end of file--\n";

// COMPLETE, index.ckpt, then the rank files of a save by two ranks.
std::vector<std::string> file_names();

// The files' contents, as many as the input holds (at most file_names()).
std::vector<std::string> split_files(std::string_view input);
std::string join_files(const std::vector<std::string>& contents);

// Writes each content to its file in `dir` (created), and removes the files
// that `contents` is too short to hold.
void write_files(const std::string& dir, const std::vector<std::string>& contents);
// The contents of `dir`'s files (empty for a missing one).
std::vector<std::string> read_files(const std::string& dir);

// What rank `rank` of `world` holds of the model the fuzzer loads into:
// a matrix with more rows than ranks, a vector with fewer, a 0-dim and an
// empty parameter, their data zero.
engine::checkpoint::ShardedState model_state(int rank, int world);

}  // namespace fuzz
