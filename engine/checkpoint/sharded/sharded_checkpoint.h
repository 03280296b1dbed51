#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "engine/io/file_system.h"
#include "engine/model/sharding/shard_layout.h"
#include "engine/optim/optimizer_state.h"

// Sharded, reshardable checkpoints: each rank writes the chunks of the
// parameters (and of their optimizer state) it holds, and any world size
// reads back the rows it now holds.
//
// A checkpoint is a directory:
//   rank_<r>.ckpt  rank r's chunks (rank k of a shard group holds chunk k,
//                  so ranks beyond the first shard group write none)
//   index.ckpt     every tensor's full shape and layout, and the rest of
//                  the checkpoint (rank 0's `common`)
//   COMPLETE       written last, once every rank's file is on disk
// Every file is written atomically (engine/checkpoint/file.h) and names the
// save it belongs to; a directory whose marker is missing, or whose files
// come from different saves, is refused.
namespace engine::checkpoint {

// What one rank holds: its piece of every parameter and the optimizer state
// of each (by parameter name, as optim::optimizer_state gives it; an absent
// name has no state). A tensor value whose shape is the shard's is sharded
// with the parameter; any other value is the same on every rank.
struct ShardedState {
  std::vector<model::sharding::LocalShard> shards;
  std::map<std::string, optim::ValueDict> optimizer;
};

// Collective over the default group (or alone when not distributed).
// Every rank gets the same CheckpointError if any rank failed to write,
// naming each rank that failed, and then no marker exists: the previous
// save's marker is removed before any rank writes. `fs`: where every file
// operation goes (tests put a failing one there).
void save_sharded(const std::string& dir, const ShardedState& mine,
                  const c10::impl::GenericDict& common,
                  io::FileSystem& fs = io::posix_file_system());

// Whether `path` is a sharded checkpoint's directory (it holds an index).
bool is_sharded_checkpoint(const std::string& path);

// Whether the save that wrote the sharded checkpoint `dir` finished: its
// marker is there. No collectives.
bool is_finished_sharded_checkpoint(const std::string& dir);

// No collectives: fills every shard's data with the rows it holds now
// (padding zeroed), whatever world size saved them, and replaces
// mine.optimizer with the optimizer state resharded the same way. Returns
// the index's `common`. CheckpointError, naming the file: no marker (an
// unfinished save), files from different saves, a missing, corrupt or
// truncated file, a parameter missing from the checkpoint or of another
// shape.
c10::impl::GenericDict load_sharded(const std::string& dir, ShardedState& mine);

// Whole tensors: parameters by name, optimizer state by parameter name.
struct FullState {
  std::map<std::string, at::Tensor> params;
  std::map<std::string, optim::ValueDict> optimizer;
};

// Collective: every rank's pieces assembled on rank 0 into whole tensors;
// the other ranks get an empty FullState.
FullState gather_full(const ShardedState& mine);

// No collectives: the reverse, each rank taking its chunks of `full`.
// CheckpointError (naming `source`) if a parameter is missing or of
// another shape.
void scatter_full(const FullState& full, ShardedState& mine, const std::string& source);

}  // namespace engine::checkpoint
