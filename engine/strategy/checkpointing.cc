#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros_like.h>

#include <iostream>

#include "engine/checkpoint/all_ranks.h"
#include "engine/checkpoint/file.h"
#include "engine/dist/dist.h"
#include "engine/optim/optimizer_state.h"
#include "engine/optim/zero_redundancy_optimizer.h"
#include "engine/strategy/checkpoint_entries.h"
#include "engine/strategy/strategy.h"

namespace engine::strategy {
namespace {

using Dict = c10::impl::GenericDict;

// Every rank's state of `generator` as the rows of one tensor.
at::Tensor gathered_state(at::Generator& generator) {
  at::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state();
  }
  return rows_of_all_ranks(state);
}

void restore_row(at::Generator& generator, const at::Tensor& rows) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(rows[dist::get_rank()].clone());
}

// Stopped inside an accumulation group (of any of the wrappers), the
// gradients summed so far are part of the state, and each rank's differ (no
// sync before the group ends).
Dict pending_gradients(torch::nn::Module& module,
                       const std::vector<std::pair<std::string, optim::OptimWrapper*>>& wrappers) {
  Dict out = empty_extra();
  bool inside_group = false;
  for (const auto& item : wrappers) inside_group = inside_group || !item.second->should_update();
  if (!inside_group) return out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const at::Tensor& grad = item.value().grad();
    const at::Tensor mine = grad.defined() ? grad.detach() : at::zeros_like(item.value());
    out.insert(item.key(), rows_of_all_ranks(mine));
  }
  return out;
}

}  // namespace

Dict BaseStrategy::rng_states() {
  Dict states = empty_extra();
  states.insert("engine", gathered_state(generator_));
  if (options_.seed_process_generator) {
    auto process_generator = at::detail::getDefaultCPUGenerator();
    states.insert("torch_cpu", gathered_state(process_generator));
  }
  return states;
}

void BaseStrategy::restore_rng_states(const Dict& states, const std::string& path) {
  const at::Tensor engine_rows = states.at("engine").toTensor();
  if (engine_rows.size(0) != dist::get_world_size()) {
    if (dist::get_rank() == 0) {
      std::cerr << "checkpoint " << path << " holds the RNG states of " << engine_rows.size(0)
                << " ranks, this run has " << dist::get_world_size()
                << ": the generators keep their seeds, so the run will not replay the old one\n";
    }
    return;
  }
  restore_row(generator_, engine_rows);
  if (options_.seed_process_generator && states.contains("torch_cpu")) {
    auto process_generator = at::detail::getDefaultCPUGenerator();
    restore_row(process_generator, states.at("torch_cpu").toTensor());
  }
}

Dict BaseStrategy::pending_gradients() {
  return strategy::pending_gradients(module(), optim_wrappers_by_name());
}

void BaseStrategy::restore_pending_gradients(const Dict& saved, const std::string& path) {
  for (auto& item : module().named_parameters(/*recurse=*/true)) {
    if (!saved.contains(item.key())) continue;
    const at::Tensor row = my_row(saved.at(item.key()).toTensor(), path);
    item.value().mutable_grad() = row.to(item.value().options()).clone();
  }
}

Dict BaseStrategy::wrapper_state() { return empty_extra(); }

void BaseStrategy::restore_wrapper_state(const Dict&, const std::string&) {}

void BaseStrategy::save_checkpoint(const std::string& path, const TrainProgress& progress,
                                   const Extra& extra) {
  const Prepared& parts = prepared();
  Dict meta = empty_extra();
  meta.insert("iter", progress.iter);
  meta.insert("epoch", progress.epoch);
  if (progress.epoch_position) meta.insert("epoch_position", *progress.epoch_position);
  meta.insert("seed", seed_);
  meta.insert("world_size", static_cast<int64_t>(dist::get_world_size()));
  Dict training = empty_extra();
  training.insert("meta", meta);
  if (parts.param_scheduler || !parts.param_schedulers.empty()) {
    training.insert("param_schedulers",
                    by_wrapper_name([this](const std::string& name, optim::OptimWrapper&) {
                      return scheduler_of(name)->state();
                    }));
  }
  training.insert("rng", rng_states());
  const Dict gradients = pending_gradients();
  if (!gradients.empty()) training.insert("pending_gradients", gradients);
  const Dict wrapper = wrapper_state();
  if (!wrapper.empty()) training.insert("wrapper", wrapper);
  const Dict optim_wrapper =
      by_wrapper_name([](const std::string&, optim::OptimWrapper& wrapper) -> c10::IValue {
        const Dict state = wrapper.state();
        return state.empty() ? c10::IValue() : c10::IValue(state);
      }).toGenericDict();
  if (!optim_wrapper.empty()) training.insert("optim_wrapper", optim_wrapper);
  training.insert("extra", extra.copy());
  for (const auto& item : optim_wrappers_by_name()) {
    optim::consolidate_if_sharded(item.second->optimizer());
  }
  write_checkpoint(path, training);
}

c10::IValue BaseStrategy::by_wrapper_name(
    const std::function<c10::IValue(const std::string&, optim::OptimWrapper&)>& value_of) const {
  if (!prepared().optim_wrappers) {
    const c10::IValue value = value_of("", *prepared().optim_wrapper);
    return value.isNone() ? c10::IValue(empty_extra()) : value;
  }
  Dict out = empty_extra();
  for (const auto& [name, wrapper] : optim_wrappers_by_name()) {
    const c10::IValue value = value_of(name, *wrapper);
    if (!value.isNone()) out.insert(name, value);
  }
  return out;
}

optim::MultiStepLR* BaseStrategy::scheduler_of(const std::string& name) const {
  const Prepared& parts = prepared();
  if (name.empty()) return parts.param_scheduler.get();
  const auto found = parts.param_schedulers.find(name);
  return found == parts.param_schedulers.end() ? nullptr : found->second.get();
}

void BaseStrategy::write_checkpoint(const std::string& path, Dict training) {
  write_single_file(
      path, std::move(training), [this] { return checkpoint::state_dict(module()); },
      [this] {
        return by_wrapper_name([](const std::string&, optim::OptimWrapper& wrapper) -> c10::IValue {
          return optim::to_state_dict(optim::optimizer_state(wrapper.optimizer()));
        });
      });
}

void BaseStrategy::write_single_file(const std::string& path, Dict training,
                                     const std::function<checkpoint::StateDict()>& model_state,
                                     const std::function<c10::IValue()>& optimizer_state) {
  checkpoint::on_first_rank_for_all(
      [&] {
        training.insert("state_dict", checkpoint::to_dict(model_state()));
        training.insert("optimizer", optimizer_state());
        checkpoint::save_file(path, training, file_system());
      },
      "save the checkpoint");
}

void BaseStrategy::for_each_saved_wrapper(
    const c10::IValue& entry, const std::string& key, const std::string& path, bool required,
    const std::function<void(const std::string&, optim::OptimWrapper&, const c10::IValue&,
                             const std::string&)>& load) const {
  const std::string what = "checkpoint " + path + "'s \"" + key + "\" entry";
  if (!prepared().optim_wrappers) {
    load("", *prepared().optim_wrapper, entry, what);
    return;
  }
  if (!entry.isGenericDict()) {
    throw checkpoint::CheckpointError(dist::on_rank(
        dist::get_rank(), what + " is not a dict of the optimizer wrappers' by name"));
  }
  const Dict saved = entry.toGenericDict();
  for (const auto& [name, wrapper] : optim_wrappers_by_name()) {
    if (saved.contains(name)) {
      load(name, *wrapper, saved.at(name), what + " for \"" + name + "\"");
    } else if (required) {
      throw checkpoint::CheckpointError(dist::on_rank(
          dist::get_rank(), what + " has nothing for the optimizer wrapper \"" + name +
                                "\": it was saved with other optimizer wrappers, or with one"));
    }
  }
}

void BaseStrategy::restore_optim_wrapper_state(const c10::IValue& saved, const std::string& path) {
  for_each_saved_wrapper(
      saved, "optim_wrapper", path, /*required=*/false,
      [](const std::string&, optim::OptimWrapper& wrapper, const c10::IValue& value,
         const std::string& what) {
        if (!value.isGenericDict()) {
          throw checkpoint::CheckpointError(
              dist::on_rank(dist::get_rank(), what + " is not a dict"));
        }
        try {
          wrapper.load_state(value.toGenericDict());
        } catch (const dist::InvalidArgument& error) {
          // The wrapper's error already names the rank.
          throw checkpoint::CheckpointError(what + " cannot be restored: " + error.what());
        }
      });
}

Dict BaseStrategy::read_checkpoint(const std::string& path, const LoadOptions& options,
                                   bool with_optimizer) {
  const Dict content = read_single_file(path);
  const checkpoint::StateDict weights =
      checkpoint::from_dict(checkpoint_entry(content, "state_dict", path).toGenericDict(),
                            at::Device(options.map_location));
  checkpoint::load_state_dict(module(), checkpoint::revise_keys(weights, options.revise_keys),
                              options.strict, path);
  if (with_optimizer) {
    for_each_saved_wrapper(
        checkpoint_entry(content, "optimizer", path), "optimizer", path, /*required=*/true,
        [](const std::string&, optim::OptimWrapper& wrapper, const c10::IValue& value,
           const std::string& what) {
          optim::load_optimizer_state(wrapper.optimizer(), optimizer_value(value, what));
        });
  }
  return content;
}

Dict BaseStrategy::load_checkpoint(const std::string& path, const LoadOptions& options) {
  return read_checkpoint(path, options, /*with_optimizer=*/false);
}

Resumed BaseStrategy::resume(const std::string& path, const LoadOptions& options) {
  const Dict content = read_checkpoint(path, options, /*with_optimizer=*/true);
  const Prepared& parts = prepared();
  if (parts.param_scheduler || !parts.param_schedulers.empty()) {
    for_each_saved_wrapper(
        checkpoint_entry(content, "param_schedulers", path), "param_schedulers", path,
        /*required=*/true,
        [this](const std::string& name, optim::OptimWrapper&, const c10::IValue& value,
               const std::string&) { scheduler_of(name)->load_state(value); });
  }
  restore_rng_states(checkpoint_entry(content, "rng", path).toGenericDict(), path);
  if (content.contains("pending_gradients")) {
    restore_pending_gradients(content.at("pending_gradients").toGenericDict(), path);
  }
  if (content.contains("wrapper"))
    restore_wrapper_state(content.at("wrapper").toGenericDict(), path);
  if (content.contains("optim_wrapper"))
    restore_optim_wrapper_state(content.at("optim_wrapper"), path);
  const Dict meta = checkpoint_entry(content, "meta", path).toGenericDict();
  Resumed out{
      {checkpoint_entry(meta, "iter", path).toInt(), checkpoint_entry(meta, "epoch", path).toInt()},
      checkpoint_entry(content, "extra", path).toGenericDict()};
  if (meta.contains("epoch_position"))
    out.progress.epoch_position = meta.at("epoch_position").toInt();
  return out;
}

}  // namespace engine::strategy
