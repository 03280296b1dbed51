#pragma once

#include <ATen/core/Dict.h>

#include <string>

#include "engine/checkpoint/file.h"

// The files of a sharded checkpoint's directory (sharded_checkpoint.h lists
// them), as its writer and its reader name them.
namespace engine::checkpoint::sharded {

using Dict = c10::impl::GenericDict;

inline constexpr const char* kIndex = "index.ckpt";
inline constexpr const char* kMarker = "COMPLETE";

std::string in_dir(const std::string& dir, const std::string& name);

// The file rank `rank` writes: rank_00003.ckpt.
std::string rank_file(int rank);

// A CheckpointError that names this rank.
CheckpointError error_here(const std::string& what);

// dict[key], a dict; CheckpointError naming `file` when the key is absent.
Dict dict_at(const Dict& dict, const std::string& key, const std::string& file);

}  // namespace engine::checkpoint::sharded
