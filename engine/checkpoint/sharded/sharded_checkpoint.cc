#include "engine/checkpoint/sharded/sharded_checkpoint.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>

#include "engine/checkpoint/file.h"
#include "engine/dist/dist.h"

namespace engine::checkpoint {
namespace {

using Dict = c10::impl::GenericDict;
using model::sharding::LocalShard;
using model::sharding::ShardLayout;
using PieceOf = std::function<at::Tensor(int chunk)>;

constexpr const char* kIndex = "index.ckpt";
constexpr const char* kMarker = "COMPLETE";

std::string in_dir(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

std::string rank_file(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.ckpt", rank);
  return name;
}

CheckpointError error_here(const std::string& what) {
  return CheckpointError(dist::on_rank(dist::get_rank(), what));
}

// Chunk `shard.chunk`'s rows that hold data, in its own storage (a view
// would pickle the unit's whole flat shard).
at::Tensor valid_piece(const LocalShard& shard, const at::Tensor& padded) {
  return padded.detach().narrow(0, 0, shard.layout.valid_rows(shard.chunk)).clone();
}

bool sharded_with(const c10::IValue& value, const LocalShard& shard) {
  return value.isTensor() && value.toTensor().sizes() == shard.data.sizes();
}

// What rank files hold, and what gather_full gathers: the chunks this rank
// is the first holder of (rank k holds chunk k).
Dict rank_content(const ShardedState& mine, const std::string& save_id) {
  Dict pieces = optim::empty_value_dict(), sharded = optim::empty_value_dict(),
       whole = optim::empty_value_dict();
  for (const LocalShard& shard : mine.shards) {
    if (shard.chunk != dist::get_rank()) continue;
    pieces.insert(shard.name, valid_piece(shard, shard.data));
    const auto state = mine.optimizer.find(shard.name);
    if (state == mine.optimizer.end()) continue;
    Dict sharded_values = optim::empty_value_dict(), whole_values = optim::empty_value_dict();
    for (const auto& item : state->second) {
      if (sharded_with(item.value(), shard)) {
        sharded_values.insert(item.key(), valid_piece(shard, item.value().toTensor()));
      } else {
        whole_values.insert(item.key(), item.value());
      }
    }
    sharded.insert(shard.name, sharded_values);
    whole.insert(shard.name, whole_values);
  }
  Dict content = optim::empty_value_dict();
  content.insert("save_id", save_id);
  content.insert("rank", static_cast<int64_t>(dist::get_rank()));
  content.insert("pieces", pieces);
  content.insert("optimizer_sharded", sharded);
  content.insert("optimizer_whole", whole);
  return content;
}

Dict index_content(const ShardedState& mine, const std::string& save_id, const Dict& common) {
  Dict tensors = optim::empty_value_dict();
  for (const LocalShard& shard : mine.shards) {
    Dict entry = optim::empty_value_dict();
    entry.insert("sizes", c10::List<int64_t>(shard.layout.full_sizes));
    entry.insert("shards", static_cast<int64_t>(shard.layout.shards));
    tensors.insert(shard.name, entry);
  }
  Dict index = optim::empty_value_dict();
  index.insert("save_id", save_id);
  index.insert("world_size", static_cast<int64_t>(dist::get_world_size()));
  index.insert("tensors", tensors);
  index.insert("common", common);
  return index;
}

// Rank 0 removes the old marker before any rank writes, and names the save.
std::string begin_save(const std::string& dir, io::FileSystem& fs, const std::string& what) {
  std::string save_id;
  on_first_rank_for_all(
      [&] {
        const std::string marker = in_dir(dir, kMarker);
        const int error = fs.remove(marker);
        if (error != 0 && error != ENOENT) {
          throw CheckpointError(marker + ": cannot remove the previous save's marker (" +
                                std::strerror(error) + ")");
        }
        save_id =
            std::to_string(std::random_device{}()) + "-" + std::to_string(std::random_device{}());
      },
      what);
  std::vector<c10::IValue> shared{save_id};
  dist::broadcast_object_list(shared, 0);
  return shared[0].toStringRef();
}

// Rows [begin, begin + count) of a tensor saved in `saved`'s chunks.
at::Tensor saved_rows(const ShardLayout& saved, int64_t begin, int64_t count,
                      const PieceOf& piece_of, const std::string& what) {
  std::vector<at::Tensor> parts;
  const int64_t chunk_rows = saved.chunk_rows;
  for (int64_t k = begin / chunk_rows; k * chunk_rows < begin + count; ++k) {
    const at::Tensor piece = piece_of(static_cast<int>(k));
    if (piece.dim() == 0 || piece.size(0) != saved.valid_rows(static_cast<int>(k))) {
      throw error_here(what + ": chunk " + std::to_string(k) + " has " +
                       std::to_string(piece.dim() ? piece.size(0) : 0) + " rows, its layout " +
                       std::to_string(saved.valid_rows(static_cast<int>(k))));
    }
    const int64_t low = std::max(begin, k * chunk_rows);
    const int64_t high = std::min(begin + count, (k + 1) * chunk_rows);
    parts.push_back(piece.narrow(0, low - k * chunk_rows, high - low));
  }
  return at::cat(parts);
}

// `target`'s first `count` rows from rows [begin, ...) of the saved tensor;
// the rest zeroed.
void fill_rows(at::Tensor target, int64_t begin, int64_t count, const ShardLayout& saved,
               const PieceOf& piece_of, const std::string& what) {
  c10::NoGradGuard no_grad;
  target.zero_();
  if (count > 0) target.narrow(0, 0, count).copy_(saved_rows(saved, begin, count, piece_of, what));
}

Dict dict_at(const Dict& dict, const std::string& key, const std::string& file) {
  if (!dict.contains(key)) throw error_here(file + " has no \"" + key + "\" entry");
  return dict.at(key).toGenericDict();
}

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

void save_sharded(const std::string& dir, const ShardedState& mine, const Dict& common,
                  io::FileSystem& fs) {
  const std::string what = "save sharded checkpoint " + dir;
  const std::string save_id = begin_save(dir, fs, what);
  throw_if_any_rank_failed(
      dist::failure_of([&] {
        save_file(in_dir(dir, rank_file(dist::get_rank())), rank_content(mine, save_id), fs);
        if (dist::get_rank() == 0)
          save_file(in_dir(dir, kIndex), index_content(mine, save_id, common), fs);
      }),
      what);
  on_first_rank_for_all(
      [&] {
        Dict marker = optim::empty_value_dict();
        marker.insert("save_id", save_id);
        try {
          save_file(in_dir(dir, kMarker), marker, fs);
        } catch (const CheckpointError&) {
          // A marker in place whose folder did not sync is a save the
          // caller is told failed: it must not look finished.
          fs.remove(in_dir(dir, kMarker));
          throw;
        }
      },
      what);
}

bool is_sharded_checkpoint(const std::string& path) {
  return std::filesystem::is_directory(path) && std::filesystem::exists(in_dir(path, kIndex));
}

bool is_finished_sharded_checkpoint(const std::string& dir) {
  return std::filesystem::exists(in_dir(dir, kMarker));
}

Dict load_sharded(const std::string& dir, ShardedState& mine) {
  // A file that passed its checks but whose content is not what
  // save_sharded writes: an entry missing (Dict::at) or of another type.
  const auto malformed = [&](const std::string& detail) {
    return error_here("sharded checkpoint " + dir +
                      " is not of the layout save_checkpoint writes (" + detail +
                      "); resume from another checkpoint");
  };
  try {
    return read_sharded(dir, mine);
  } catch (const c10::Error& error) {
    throw malformed(error.what_without_backtrace());
  } catch (const std::out_of_range& error) {
    throw malformed(error.what());
  }
}

FullState gather_full(const ShardedState& mine) {
  const auto all = dist::gather_object(rank_content(mine, ""), 0);
  FullState full;
  if (!all) return full;
  const auto of = [&](int rank) { return (*all)[rank].toGenericDict(); };
  for (const LocalShard& shard : mine.shards) {
    const ShardLayout& layout = shard.layout;
    const auto rows_of = [&](const PieceOf& piece_of, const at::TensorOptions& options) {
      // Rows as shards hold them: a 0-dim parameter is one row of one element.
      at::Tensor out = at::empty(
          layout.full_sizes.empty() ? std::vector<int64_t>{1} : layout.full_sizes, options);
      fill_rows(out, 0, layout.rows, layout, piece_of, shard.name);
      return out.view(layout.full_sizes);
    };
    full.params[shard.name] =
        rows_of([&](int k) { return dict_at(of(k), "pieces", "").at(shard.name).toTensor(); },
                shard.data.options());
    const Dict whole = dict_at(of(0), "optimizer_whole", "");
    if (!whole.contains(shard.name)) continue;
    optim::ValueDict values = whole.at(shard.name).toGenericDict().copy();
    for (const auto& item : dict_at(dict_at(of(0), "optimizer_sharded", ""), shard.name, "")) {
      const std::string key = item.key().toStringRef();
      values.insert(key, rows_of(
                             [&](int k) {
                               return dict_at(dict_at(of(k), "optimizer_sharded", ""), shard.name,
                                              "")
                                   .at(key)
                                   .toTensor();
                             },
                             item.value().toTensor().options()));
    }
    full.optimizer.insert_or_assign(shard.name, values);
  }
  return full;
}

void scatter_full(const FullState& full, ShardedState& mine, const std::string& source) {
  std::string missing;
  std::map<std::string, optim::ValueDict> optimizer;
  c10::NoGradGuard no_grad;
  for (LocalShard& shard : mine.shards) {
    const auto param = full.params.find(shard.name);
    if (param == full.params.end()) {
      missing += " " + shard.name;
      continue;
    }
    if (param->second.sizes() != at::IntArrayRef(shard.layout.full_sizes)) {
      throw error_here(source + " holds " + shard.name + " with shape " +
                       c10::str(param->second.sizes()) + ", the model's is " +
                       c10::str(at::IntArrayRef(shard.layout.full_sizes)));
    }
    const auto shard_of = [&](const at::Tensor& whole) {
      at::Tensor out = at::empty(shard.data.sizes(), whole.options());
      model::sharding::copy_shard(whole.contiguous(), shard.layout, shard.chunk, out.view({-1}));
      return out;
    };
    shard.data.copy_(shard_of(param->second));
    const auto state = full.optimizer.find(shard.name);
    if (state == full.optimizer.end()) continue;
    optim::ValueDict values = state->second.copy();
    for (const auto& item : state->second) {
      if (!item.value().isTensor() ||
          item.value().toTensor().sizes() != at::IntArrayRef(shard.layout.full_sizes)) {
        continue;
      }
      values.insert_or_assign(item.key(), shard_of(item.value().toTensor()));
    }
    optimizer.insert_or_assign(shard.name, values);
  }
  if (!missing.empty()) throw error_here(source + " lacks the parameters" + missing);
  mine.optimizer = std::move(optimizer);
}

}  // namespace engine::checkpoint
