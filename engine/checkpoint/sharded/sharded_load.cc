#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/StringUtil.h>

#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/checkpoint/file.h"
#include "engine/checkpoint/sharded/directory.h"
#include "engine/checkpoint/sharded/reshard.h"
#include "engine/checkpoint/sharded/sharded_checkpoint.h"

// Reading a sharded checkpoint: no collectives, any world size.
namespace engine::checkpoint {
namespace sharded {
namespace {

using model::sharding::LocalShard;
using model::sharding::ShardLayout;

// The rank files of one save, read once each.
class SavedFiles {
 public:
  SavedFiles(std::string dir, std::string save_id)
      : dir_(std::move(dir)), save_id_(std::move(save_id)) {}

  const Dict& of(int rank) {
    auto found = files_.find(rank);
    if (found != files_.end()) return found->second;
    const std::string path = in_dir(dir_, rank_file(rank));
    if (!std::filesystem::exists(path)) {
      throw error_here("sharded checkpoint " + dir_ + " lacks " + rank_file(rank) +
                       ", written by rank " + std::to_string(rank) + " of the save");
    }
    Dict content = load_file(path).toGenericDict();
    if (!content.contains("save_id") || content.at("save_id").toStringRef() != save_id_) {
      throw error_here(path + " belongs to another save than " + kIndex +
                       ": the directory mixes two saves; resume from another checkpoint");
    }
    return files_.emplace(rank, std::move(content)).first->second;
  }
  at::Tensor piece(int rank, const std::string& entry, const std::string& name) {
    return dict_at(of(rank), entry, rank_file(rank)).at(name).toTensor();
  }
  Dict values(int rank, const std::string& entry, const std::string& name) {
    return dict_at(dict_at(of(rank), entry, rank_file(rank)), name, rank_file(rank));
  }

 private:
  std::string dir_, save_id_;
  std::map<int, Dict> files_;
};

Dict read_index(const std::string& dir) {
  if (!std::filesystem::exists(in_dir(dir, kMarker))) {
    throw error_here("sharded checkpoint " + dir + " has no " + kMarker +
                     " marker: the save that wrote it did not finish; resume from an earlier "
                     "checkpoint");
  }
  const Dict marker = load_file(in_dir(dir, kMarker)).toGenericDict();
  Dict index = load_file(in_dir(dir, kIndex)).toGenericDict();
  if (index.at("save_id").toStringRef() != marker.at("save_id").toStringRef()) {
    throw error_here("sharded checkpoint " + dir + ": " + kIndex + " and " + kMarker +
                     " belong to different saves; resume from another checkpoint");
  }
  return index;
}

// The layout `shard` was saved with, by `saved_world` ranks; CheckpointError
// if reshaped, or split into another number of chunks than ranks saved it.
std::optional<ShardLayout> saved_layout(const Dict& tensors, const LocalShard& shard,
                                        int64_t saved_world, const std::string& dir) {
  if (!tensors.contains(shard.name)) return std::nullopt;
  const Dict entry = tensors.at(shard.name).toGenericDict();
  // Checkpoint files hold untagged lists (dist::pickle_untagged): of Any.
  std::vector<int64_t> sizes;
  for (const c10::IValue& size : entry.at("sizes").toListRef()) sizes.push_back(size.toInt());
  if (sizes != shard.layout.full_sizes) {
    throw error_here("sharded checkpoint " + dir + " holds " + shard.name + " with shape " +
                     c10::str(at::IntArrayRef(sizes)) + ", the model's is " +
                     c10::str(at::IntArrayRef(shard.layout.full_sizes)));
  }
  const int64_t shards = entry.at("shards").toInt();
  if (shards < 1 || shards > saved_world) {
    throw error_here("sharded checkpoint " + dir + " says " + shard.name + " is split into " +
                     std::to_string(shards) + " chunks, but " + std::to_string(saved_world) +
                     " ranks saved it; resume from another checkpoint");
  }
  return model::sharding::shard_layout(sizes, static_cast<int>(shards));
}

// The optimizer state of `shard` from the saved chunks, padded as the shard.
std::optional<optim::ValueDict> load_state(SavedFiles& files, const LocalShard& shard,
                                           const ShardLayout& saved) {
  const Dict whole = dict_at(files.of(0), "optimizer_whole", rank_file(0));
  if (!whole.contains(shard.name)) return std::nullopt;
  optim::ValueDict values = whole.at(shard.name).toGenericDict().copy();
  const int64_t begin = shard.chunk * shard.layout.chunk_rows;
  const int64_t count = shard.layout.valid_rows(shard.chunk);
  for (const auto& item : files.values(0, "optimizer_sharded", shard.name)) {
    const std::string key = item.key().toStringRef();
    at::Tensor padded = at::empty(shard.data.sizes(), item.value().toTensor().options());
    fill_rows(
        padded, begin, count, saved,
        [&](int k) { return files.values(k, "optimizer_sharded", shard.name).at(key).toTensor(); },
        "optimizer state " + key + " of " + shard.name);
    values.insert(key, padded);
  }
  return values;
}

// load_sharded without the translation of c10's errors.
Dict read_sharded(const std::string& dir, ShardedState& mine) {
  const Dict index = read_index(dir);
  const int64_t saved_world = index.at("world_size").toInt();
  const Dict tensors = index.at("tensors").toGenericDict();
  SavedFiles files(dir, index.at("save_id").toStringRef());
  std::string missing;
  std::map<std::string, optim::ValueDict> optimizer;
  for (LocalShard& shard : mine.shards) {
    const auto saved = saved_layout(tensors, shard, saved_world, dir);
    if (!saved) {
      missing += " " + shard.name;
      continue;
    }
    fill_rows(
        shard.data, shard.chunk * shard.layout.chunk_rows, shard.layout.valid_rows(shard.chunk),
        *saved, [&](int k) { return files.piece(k, "pieces", shard.name); }, shard.name);
    if (auto state = load_state(files, shard, *saved))
      optimizer.insert_or_assign(shard.name, *state);
  }
  if (!missing.empty()) {
    throw error_here("sharded checkpoint " + dir + " lacks the parameters" + missing);
  }
  mine.optimizer = std::move(optimizer);
  return index.at("common").toGenericDict();
}

}  // namespace
}  // namespace sharded

bool is_sharded_checkpoint(const std::string& path) {
  return std::filesystem::is_directory(path) &&
         std::filesystem::exists(sharded::in_dir(path, sharded::kIndex));
}

bool is_finished_sharded_checkpoint(const std::string& dir) {
  return std::filesystem::exists(sharded::in_dir(dir, sharded::kMarker));
}

c10::impl::GenericDict load_sharded(const std::string& dir, ShardedState& mine) {
  // A file that passed its checks but whose content is not what
  // save_sharded writes: an entry missing (Dict::at) or of another type.
  const auto malformed = [&](const std::string& detail) {
    return sharded::error_here("sharded checkpoint " + dir +
                               " is not of the layout save_checkpoint writes (" + detail +
                               "); resume from another checkpoint");
  };
  try {
    return sharded::read_sharded(dir, mine);
  } catch (const c10::Error& error) {
    throw malformed(error.what_without_backtrace());
  } catch (const std::out_of_range& error) {
    throw malformed(error.what());
  }
}

}  // namespace engine::checkpoint
