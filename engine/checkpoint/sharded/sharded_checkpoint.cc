#include "engine/checkpoint/sharded/sharded_checkpoint.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "engine/checkpoint/all_ranks.h"
#include "engine/checkpoint/file.h"
#include "engine/checkpoint/sharded/directory.h"
#include "engine/checkpoint/sharded/reshard.h"
#include "engine/dist/dist.h"

namespace engine::checkpoint {
namespace {

using model::sharding::LocalShard;
using model::sharding::ShardLayout;
using sharded::Dict;
using sharded::dict_at;
using sharded::error_here;
using sharded::fill_rows;
using sharded::in_dir;
using sharded::kIndex;
using sharded::kMarker;
using sharded::PieceOf;
using sharded::rank_file;

// Chunk `shard.chunk`'s rows that hold data: a view, which pickling copies
// alone (dist/pickle.h), as a deferred save's copy does.
at::Tensor valid_piece(const LocalShard& shard, const at::Tensor& padded) {
  return padded.detach().narrow(0, 0, shard.layout.valid_rows(shard.chunk));
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
