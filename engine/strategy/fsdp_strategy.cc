#include "engine/strategy/fsdp_strategy.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <unordered_map>

#include "engine/checkpoint/all_ranks.h"
#include "engine/checkpoint/file.h"
#include "engine/dist/dist.h"
#include "engine/model/batch_norm.h"
#include "engine/model/wrappers/wrapper_registry.h"
#include "engine/optim/optimizer_state.h"
#include "engine/strategy/checkpoint_entries.h"

namespace engine::strategy {
namespace {

using Dict = c10::impl::GenericDict;

constexpr const char* kStrategy = "FSDPStrategy";

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

// Each gradient as every rank's rows, under "<kind>/<name>", with
// "<kind>/<name>/defined" saying which ranks had one (an undefined gradient
// is not a zero one: the optimizer skips it); left out where no rank had it.
void insert_rows(Dict& out, const std::string& key, const at::Tensor& grad, at::IntArrayRef sizes,
                 const at::TensorOptions& options) {
  const at::Tensor defined = rows_of_all_ranks(at::scalar_tensor(
      static_cast<int64_t>(grad.defined()), at::TensorOptions().dtype(at::kLong)));
  if (!defined.any().item<bool>()) return;
  const at::Tensor mine = grad.defined() ? grad.detach() : at::zeros(sizes, options);
  out.insert(key, rows_of_all_ranks(mine));
  out.insert(key + "/defined", defined);
}

// This rank's gradient saved under `key`, undefined where it had none; it
// must have `sizes` (another sharding saved it otherwise).
at::Tensor saved_row(const Dict& saved, const std::string& key, at::IntArrayRef sizes,
                     const at::TensorOptions& options, const std::string& path) {
  if (!saved.contains(key)) return at::Tensor();
  const at::Tensor defined = my_row(saved.at(key + "/defined").toTensor(), path);
  const at::Tensor row = my_row(saved.at(key).toTensor(), path);
  if (row.sizes() != sizes) {
    throw checkpoint::CheckpointError(dist::on_rank(
        dist::get_rank(), "checkpoint " + path + " was saved inside a gradient accumulation " +
                              "group with another sharding (" + key + " has shape " +
                              c10::str(row.sizes()) + ", here " + c10::str(sizes) +
                              "); resume it with the strategy and world size that saved it"));
  }
  return defined.item<int64_t>() ? row.to(options).clone() : at::Tensor();
}

}  // namespace

StateDictType parse_state_dict_type(const std::string& name) {
  const std::string key = upper(name);
  if (key == "SHARDED" || key == "SHARDED_STATE_DICT" || key == "LOCAL" ||
      key == "LOCAL_STATE_DICT") {
    return StateDictType::kSharded;
  }
  if (key == "FULL" || key == "FULL_STATE_DICT") return StateDictType::kFull;
  throw registry::ConfigError(dist::on_rank(
      dist::get_rank(), std::string(kStrategy) + ": unknown state_dict_type \"" + name +
                            "\"; known: sharded or local, full (or SHARDED_STATE_DICT, "
                            "LOCAL_STATE_DICT, FULL_STATE_DICT)"));
}

FSDPStrategy::FSDPStrategy(EnvOptions env, FSDPStrategyOptions options)
    : BaseStrategy(std::move(env)), options_(std::move(options)) {
  check_sync_bn(options_.sync_bn, kStrategy);
}

std::shared_ptr<model::BaseModel> FSDPStrategy::wrap_model(
    std::shared_ptr<model::BaseModel> model) {
  if (options_.sync_bn) model::convert_sync_batchnorm(*model);
  registry::Json wrapper_config = options_.model_wrapper;
  if (options_.skip_init_weights) wrapper_config["skip_init_weights"] = true;
  auto wrapped =
      model::model_wrappers().build(wrapper_config, std::move(model), "MMFullyShardedDataParallel");
  if (!dynamic_cast<model::MMFullyShardedDataParallel*>(wrapped.get())) {
    throw registry::ConfigError(dist::on_rank(
        dist::get_rank(),
        std::string(kStrategy) +
            ": model_wrapper must build an MMFullyShardedDataParallel or MMZeroDataParallel; for "
            "other wrappers use DDPStrategy"));
  }
  return wrapped;
}

model::MMFullyShardedDataParallel& FSDPStrategy::wrapper() {
  return dynamic_cast<model::MMFullyShardedDataParallel&>(*prepared().model);
}

std::vector<std::string> FSDPStrategy::optimizer_parameter_names() {
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (const auto& item : module().named_parameters()) {
    names[item.value().unsafeGetTensorImpl()] = item.key();
  }
  std::vector<std::string> out;
  for (const auto& group : prepared().optim_wrapper->optimizer().param_groups()) {
    for (const auto& param : group.params()) {
      const auto found = names.find(param.unsafeGetTensorImpl());
      if (found == names.end()) {
        throw dist::InvalidArgument(dist::on_rank(
            dist::get_rank(), std::string(kStrategy) +
                                  ": the optimizer holds a tensor that is not a parameter of the "
                                  "model; build it over the wrapped model's parameters"));
      }
      out.push_back(found->second);
    }
  }
  return out;
}

checkpoint::ShardedState FSDPStrategy::sharded_state(const optim::OptimizerState* optimizer) {
  checkpoint::ShardedState state;
  state.shards = wrapper().local_shards();
  if (!optimizer) return state;
  const auto names = optimizer_parameter_names();
  for (size_t i = 0; i < names.size(); ++i) {
    const optim::ValueDict& values = optimizer->params[i];
    if (!values.empty()) state.optimizer.insert_or_assign(names[i], values);
  }
  return state;
}

optim::OptimizerState FSDPStrategy::positional(
    const std::map<std::string, optim::ValueDict>& by_name, const optim::OptimizerState& groups) {
  optim::OptimizerState out;
  out.group_options = groups.group_options;
  out.group_sizes = groups.group_sizes;
  for (const std::string& name : optimizer_parameter_names()) {
    const auto found = by_name.find(name);
    out.params.push_back(found == by_name.end() ? optim::empty_value_dict() : found->second);
  }
  return out;
}

checkpoint::StateDict FSDPStrategy::buffers() {
  std::set<std::string> params;
  for (const auto& item : module().named_parameters()) params.insert(item.key());
  checkpoint::StateDict out;
  for (const auto& item : checkpoint::state_dict(module())) {
    if (!params.count(item.first))
      out.insert({item.first, wrapper().buffer_state(item.first, item.second)});
  }
  return out;
}

std::map<std::string, std::string> FSDPStrategy::tied_names() {
  std::unordered_map<const c10::TensorImpl*, std::string> sharded_as;
  for (const auto& unit : wrapper().units()) {
    for (const auto& param : unit->parameters())
      sharded_as.emplace(param.tensor.unsafeGetTensorImpl(), param.name);
  }
  std::map<std::string, std::string> out;
  for (const auto& item : module().named_parameters()) {
    const auto found = sharded_as.find(item.value().unsafeGetTensorImpl());
    if (found != sharded_as.end() && found->second != item.key()) out[item.key()] = found->second;
  }
  return out;
}

void FSDPStrategy::load_buffers(const checkpoint::StateDict& buffers, const std::string& path) {
  checkpoint::load_state_dict(module(), buffers, /*strict=*/false, path);
}

Dict FSDPStrategy::pending_gradients() {
  Dict out = empty_extra();
  if (prepared().optim_wrapper->should_update()) return out;
  for (const auto& unit : wrapper().units()) {
    const auto grads = unit->pending_grads();
    for (size_t i = 0; i < unit->parameters().size(); ++i) {
      const auto& param = unit->parameters()[i];
      const auto& layout = unit->layout(i);
      const auto options = param.tensor.options();
      insert_rows(out, "sharded/" + param.name, grads.sharded[i], layout.shard_sizes(), options);
      insert_rows(out, "unsharded/" + param.name, grads.unsharded[i], layout.full_sizes, options);
    }
  }
  return out;
}

void FSDPStrategy::restore_pending_gradients(const Dict& saved, const std::string& path) {
  for (const auto& unit : wrapper().units()) {
    model::sharding::FlatUnit::PendingGrads grads;
    for (size_t i = 0; i < unit->parameters().size(); ++i) {
      const auto& param = unit->parameters()[i];
      const auto& layout = unit->layout(i);
      const auto options = param.tensor.options();
      grads.sharded.push_back(
          saved_row(saved, "sharded/" + param.name, layout.shard_sizes(), options, path));
      grads.unsharded.push_back(
          saved_row(saved, "unsharded/" + param.name, layout.full_sizes, options, path));
    }
    unit->restore_pending_grads(std::move(grads));
  }
}

void FSDPStrategy::write_checkpoint(const std::string& path, Dict training) {
  const optim::OptimizerState optimizer =
      optim::optimizer_state(prepared().optim_wrapper->optimizer());
  if (options_.state_dict_type == StateDictType::kFull) {
    const checkpoint::FullState full = checkpoint::gather_full(sharded_state(&optimizer));
    write_single_file(
        path, std::move(training),
        [&] {
          checkpoint::StateDict state = buffers();
          for (const auto& item : full.params) state[item.first] = item.second;
          for (const auto& [alias, name] : tied_names()) state[alias] = full.params.at(name);
          return state;
        },
        [&] { return optim::to_state_dict(positional(full.optimizer, optimizer)); });
    return;
  }
  training.insert("buffers", checkpoint::to_dict(buffers()));
  training.insert("optimizer_groups", optim::to_state_dict(positional({}, optimizer)));
  checkpoint::save_sharded(path, sharded_state(&optimizer), training, file_system());
}

Dict FSDPStrategy::read_checkpoint(const std::string& path, const LoadOptions& options,
                                   bool with_optimizer) {
  checkpoint::ShardedState state = sharded_state();
  optim::OptimizerState groups;
  Dict content = empty_extra();
  const std::string failure =
      dist::failure_of([&] { content = read_into(path, options, with_optimizer, state, groups); });
  // A rank that lacks one of its files must not leave the others training.
  checkpoint::throw_if_any_rank_failed(failure, "load checkpoint " + path);
  wrapper().load_local_shards(state.shards);
  if (with_optimizer) {
    optim::load_optimizer_state(prepared().optim_wrapper->optimizer(),
                                positional(state.optimizer, groups));
  }
  return content;
}

Dict FSDPStrategy::read_into(const std::string& path, const LoadOptions& options,
                             bool with_optimizer, checkpoint::ShardedState& state,
                             optim::OptimizerState& groups) {
  Dict content = empty_extra();
  if (checkpoint::is_sharded_checkpoint(path)) {
    content = checkpoint::load_sharded(path, state);
    load_buffers(checkpoint::from_dict(checkpoint_entry(content, "buffers", path).toGenericDict()),
                 path);
    groups = optimizer_entry(content, "optimizer_groups", path);
  } else {
    content = read_full_file(path, options, with_optimizer, state, groups);
  }
  return content;
}

Dict FSDPStrategy::read_full_file(const std::string& path, const LoadOptions& options,
                                  bool with_optimizer, checkpoint::ShardedState& state,
                                  optim::OptimizerState& groups) {
  const Dict content = read_single_file(path);
  const checkpoint::StateDict saved = checkpoint::revise_keys(
      checkpoint::from_dict(checkpoint_entry(content, "state_dict", path).toGenericDict()),
      options.revise_keys);
  checkpoint::FullState full;
  checkpoint::StateDict saved_buffers;
  std::set<std::string> params;
  for (const auto& shard : state.shards) params.insert(shard.name);
  const auto tied = tied_names();
  for (const auto& item : saved) {
    if (tied.count(item.first)) continue;  // loaded under the name its shards go by
    if (params.count(item.first)) {
      full.params[item.first] = item.second;
    } else {
      saved_buffers.insert(item);
    }
  }
  if (with_optimizer) {
    groups = optimizer_entry(content, "optimizer", path);
    const auto names = optimizer_parameter_names();
    if (groups.params.size() != names.size()) {
      throw checkpoint::CheckpointError(dist::on_rank(
          dist::get_rank(), "checkpoint " + path + " holds optimizer state for " +
                                std::to_string(groups.params.size()) +
                                " parameters, the optimizer has " + std::to_string(names.size())));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      if (!groups.params[i].empty()) full.optimizer.insert_or_assign(names[i], groups.params[i]);
    }
  }
  checkpoint::scatter_full(full, state, "checkpoint " + path);
  load_buffers(saved_buffers, path);
  return content;
}

}  // namespace engine::strategy
