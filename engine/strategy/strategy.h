#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Generator.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint/state_dict.h"
#include "engine/io/file_system.h"
#include "engine/model/activation_checkpoint/checkpointed_modules.h"
#include "engine/model/base_model.h"
#include "engine/model/tensor_dict.h"
#include "engine/optim/optim_wrapper.h"
#include "engine/optim/optim_wrapper_dict.h"
#include "engine/optim/optimizer_state.h"
#include "engine/optim/param_scheduler.h"
#include "engine/registry/registry.h"

// mmengine's strategies: environment setup, model preparation and
// checkpointing for one process or a data-parallel group.
namespace engine::strategy {

struct EnvOptions {
  // "none": use the process as it is (one process, or a rank whose engine
  // context is already set up, such as a simulator rank); "pytorch", "mpi",
  // "slurm": init_dist with `backend` unless already initialised; "auto":
  // infer_launcher from the environment (mmengine's runner does the same).
  std::string launcher = "none";
  std::string backend = "gloo";
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // Absent: drawn on rank 0 and shared (sync_random_seed).
  std::optional<int64_t> seed;
  bool diff_rank_seed = false;  // seed + rank on each rank
  bool deterministic = false;   // LibTorch's deterministic algorithms only
  // Also seed LibTorch's process-wide default generator (torch.manual_seed).
  // Turn it off where ranks share a process (the simulator): there each rank
  // draws from generator() only.
  bool seed_process_generator = true;
};

struct TrainProgress {
  int64_t iter = 0;
  int64_t epoch = 0;
  // How many positions of the epoch's sample sequence every rank together
  // has consumed: where a sampler resumes, at any world size
  // (DefaultSampler::indices). Absent from checkpoints that did not record
  // it.
  std::optional<int64_t> epoch_position;
};

// What prepare() returns: the model as trained (wrapped or not), the
// optimizer wrapper over its parameters, the scheduler (may be null).
struct Prepared {
  std::shared_ptr<model::BaseModel> model;
  // Null when optim_wrappers holds several.
  std::shared_ptr<optim::OptimWrapper> optim_wrapper;
  // mmengine's OptimWrapperDict, when the optim_wrapper config is an object
  // of wrapper configs by the names of the model's children (no "type",
  // "optimizer" or "constructor" key), each over its child's parameters:
  // {"generator": {"optimizer": ...}, "discriminator": {...}}. The model's
  // train_step(data, OptimWrapperDict&) steps them. Null with one wrapper.
  std::shared_ptr<optim::OptimWrapperDict> optim_wrappers;
  // The scheduler of optim_wrapper (may be null).
  std::shared_ptr<optim::MultiStepLR> param_scheduler;
  // With optim_wrappers, each wrapper's scheduler by the wrapper's name:
  // from a param_scheduler config keyed by those names (mmengine's form,
  // an object without "type"), else the same config built for each. Empty
  // without a scheduler.
  std::map<std::string, std::shared_ptr<optim::MultiStepLR>> param_schedulers;

  // Whichever form was prepared, as a training loop drives it: each
  // wrapper's initialize_count_status, the model's train_step with the
  // wrapper or the wrappers, each scheduler's step, and the learning rates
  // to log ("lr", or "<name>.lr" with several).
  void initialize_count_status(int64_t init_counts, int64_t max_counts) const;
  model::TensorDict train_step(const model::TensorDict& data) const;
  void step_schedulers() const;
  std::vector<std::pair<std::string, double>> learning_rates() const;
};

struct LoadOptions {
  std::string map_location = "cpu";
  bool strict = false;  // mmengine's default
  checkpoint::KeyRevisions revise_keys = checkpoint::default_key_revisions();
};

using Extra = c10::impl::GenericDict;  // Dict<str, Any>
Extra empty_extra();

struct Resumed {
  TrainProgress progress;
  Extra extra;
};

class BaseStrategy {
 public:
  explicit BaseStrategy(EnvOptions options);
  virtual ~BaseStrategy() = default;

  // Launcher and process group, then seeding. Idempotent.
  void setup_env();
  int64_t seed() const { return seed_; }
  // The seed before diff_rank_seed: the same on every rank (for samplers).
  int64_t shared_seed() const { return shared_seed_; }
  // This rank's generator, seeded by seed() (saved and restored by
  // checkpoints with every other RNG state).
  at::Generator& generator() { return generator_; }

  // Before prepare(): the modules `selection` picks run under activation
  // checkpointing (engine/model/activation_checkpoint), chosen in the
  // model once it is wrapped, their recomputations repeating the draws of
  // generator() too. Config key "activation_checkpointing" (every strategy).
  void set_activation_checkpointing(model::CheckpointSelection selection);
  // Where save_checkpoint's files go from now on (default: this process's
  // file system). Tests put one there that fails at a chosen step; it must
  // outlive the strategy's saves.
  void set_file_system(io::FileSystem& fs) { file_system_ = &fs; }
  // The paths of the modules that run checkpointed (after prepare()).
  std::vector<std::string> checkpointed_modules() const;

  // Wraps the model (per strategy), builds the optimizer wrapper and the
  // scheduler from their configs. Idempotent: later calls return the first
  // result and ignore their arguments, as mmengine's.
  const Prepared& prepare(std::shared_ptr<model::BaseModel> model,
                          const registry::Json& optim_wrapper,
                          const std::optional<registry::Json>& param_scheduler = std::nullopt);
  // As above, with a scheduler the caller built on an optimizer of its own:
  // prepare() rebuilds it on the optimizer it builds, with the same
  // milestones, gamma and step count, and returns that one. (mmengine's
  // FSDPStrategy rebuilds such a scheduler and then drops it.)
  const Prepared& prepare(std::shared_ptr<model::BaseModel> model,
                          const registry::Json& optim_wrapper,
                          const optim::MultiStepLR& built_scheduler);
  const Prepared& prepared() const;
  // The model without its wrapper.
  model::BaseModel& module();

  // Collective. Rank 0 writes the model (unwrapped), optimizer, the
  // optimizer wrapper's own state (AmpOptimWrapper's loss scaler, under
  // "optim_wrapper"), scheduler, progress, every rank's RNG states and
  // `extra` (not modified) atomically;
  // the others wait for it and get the same CheckpointError if it fails.
  // (FSDPStrategy writes a sharded checkpoint instead: see its header.)
  void save_checkpoint(const std::string& path, const TrainProgress& progress,
                       const Extra& extra = empty_extra());
  // Reads `path` on every rank into the model; returns the checkpoint's
  // other entries (meta, extra, ...).
  c10::impl::GenericDict load_checkpoint(const std::string& path, const LoadOptions& options = {});
  // load_checkpoint, then the optimizer, scheduler and RNG states: a resumed
  // run continues bit-identically. Each rank takes its own RNG state; with a
  // different world size they stay as seeded (and rank 0 says so).
  Resumed resume(const std::string& path, const LoadOptions& options = {});

 protected:
  virtual std::shared_ptr<model::BaseModel> wrap_model(std::shared_ptr<model::BaseModel> model) = 0;
  // Whether prepare() takes several optimizer wrappers (an OptimWrapperDict
  // config); a strategy that shards the optimizer's state by parameter
  // takes one.
  virtual bool takes_several_optim_wrappers() const { return true; }
  // The prepared optimizer wrappers by name: ("", the wrapper) with one.
  std::vector<std::pair<std::string, optim::OptimWrapper*>> optim_wrappers_by_name() const;

  // Writes the model, the optimizer and `training` (meta, schedulers, RNG
  // states, extra; built on every rank) to `path`. Collective. The default
  // is one file by rank 0: `training` plus "state_dict" and "optimizer".
  virtual void write_checkpoint(const std::string& path, c10::impl::GenericDict training);
  // Loads the model (and the optimizer if `with_optimizer`) from `path`;
  // returns the checkpoint's other entries.
  virtual c10::impl::GenericDict read_checkpoint(const std::string& path,
                                                 const LoadOptions& options, bool with_optimizer);
  // Gradients summed so far inside an accumulation group (empty outside
  // one), every rank's, to restore at the same world size. Collective.
  virtual c10::impl::GenericDict pending_gradients();
  // Puts back this rank's share of what pending_gradients() saved; a
  // CheckpointError when another number of ranks saved it.
  virtual void restore_pending_gradients(const c10::impl::GenericDict& saved,
                                         const std::string& path);

  // What the model wrapper carries across steps besides the model (DDP: its
  // rebuilt bucket order and its communication hook's state), every rank's,
  // under "wrapper"; empty when nothing. Collective.
  virtual c10::impl::GenericDict wrapper_state();
  // Puts back this rank's share of what wrapper_state() saved.
  virtual void restore_wrapper_state(const c10::impl::GenericDict& saved, const std::string& path);
  // OptimWrapper::load_state of the "optim_wrapper" entry; a CheckpointError
  // naming `path` when it is not what state() wrote.
  void restore_optim_wrapper_state(const c10::IValue& saved, const std::string& path);

  // One file written by rank 0: `training` with "state_dict" and
  // "optimizer" (optim::to_state_dict's layout), computed on rank 0 only.
  void write_single_file(const std::string& path, c10::impl::GenericDict training,
                         const std::function<checkpoint::StateDict()>& model_state,
                         const std::function<c10::IValue()>& optimizer_state);
  // Where checkpoints are written.
  io::FileSystem& file_system() const { return *file_system_; }
  // value_of(name, wrapper) for each prepared optimizer wrapper, as a checkpoint
  // keeps it: the value itself with one wrapper (None as an empty dict);
  // with several, a dict by name without the Nones.
  c10::IValue by_wrapper_name(
      const std::function<c10::IValue(const std::string&, optim::OptimWrapper&)>& value_of) const;
  // The scheduler of the wrapper `name` ("" when it is the only one); null
  // where there is none.
  optim::MultiStepLR* scheduler_of(const std::string& name) const;
  // The inverse: load(name, wrapper, its part of `entry`, where that came
  // from) for each prepared wrapper (named "" when it is the only one). With
  // several, `entry` must be a dict by name and, if `required`, hold every
  // name; else a CheckpointError naming the file, the `key` entry and the
  // wrapper.
  void for_each_saved_wrapper(
      const c10::IValue& entry, const std::string& key, const std::string& path, bool required,
      const std::function<void(const std::string&, optim::OptimWrapper&, const c10::IValue&,
                               const std::string&)>& load) const;

 private:
  // The scheduler of the wrapper called `wrapper` ("" when it is the only
  // one).
  using SchedulerFor = std::function<std::shared_ptr<optim::MultiStepLR>(
      const std::string& wrapper, torch::optim::Optimizer& optimizer)>;
  const Prepared& prepare_with(std::shared_ptr<model::BaseModel> model,
                               const registry::Json& optim_wrapper,
                               const SchedulerFor& param_scheduler);
  // ConfigError unless this strategy takes several optimizer wrappers.
  void check_several_wrappers_allowed() const;
  c10::impl::GenericDict rng_states();
  void restore_rng_states(const c10::impl::GenericDict& states, const std::string& path);

  EnvOptions options_;
  io::FileSystem* file_system_ = &io::posix_file_system();
  bool env_ready_ = false;
  int64_t seed_ = 0;
  int64_t shared_seed_ = 0;
  at::Generator generator_;
  std::optional<Prepared> prepared_;
  std::optional<model::CheckpointSelection> activation_checkpointing_;
  std::unique_ptr<model::CheckpointedModules> checkpointed_;
};

// The model trained as it is (moved to nothing: LibTorch modules stay where
// they were built).
class SingleDeviceStrategy : public BaseStrategy {
 public:
  using BaseStrategy::BaseStrategy;

 protected:
  std::shared_ptr<model::BaseModel> wrap_model(std::shared_ptr<model::BaseModel> model) override;
};

struct DDPStrategyOptions {
  // A MODEL_WRAPPERS config; type defaults to MMDistributedDataParallel and
  // broadcast_buffers to false (mmengine's DDPStrategy defaults).
  registry::Json model_wrapper = registry::Json::object();
  // "torch": convert the engine's BatchNorm layers to synchronised ones.
  std::optional<std::string> sync_bn;
};

// sync_bn as DDPStrategy and FSDPStrategy take it: absent, or "torch" (the
// engine's SyncBatchNorm); anything else is a ConfigError naming `strategy`.
void check_sync_bn(const std::optional<std::string>& sync_bn, const std::string& strategy);

// Wraps the model, moved first to the device the default group's
// collectives take (the rank's GPU on nccl, the CPU on gloo and mpi), in
// model_wrapper.
class DDPStrategy : public BaseStrategy {
 public:
  DDPStrategy(EnvOptions env, DDPStrategyOptions options);

 protected:
  std::shared_ptr<model::BaseModel> wrap_model(std::shared_ptr<model::BaseModel> model) override;
  c10::impl::GenericDict wrapper_state() override;
  void restore_wrapper_state(const c10::impl::GenericDict& saved, const std::string& path) override;

 private:
  DDPStrategyOptions options_;
};

// mmengine's STRATEGIES: SingleDeviceStrategy, DDPStrategy, FSDPStrategy
// (fsdp_strategy.h) and ZeroStrategy (zero_strategy.h). Keys: launcher,
// backend, timeout_s, seed, diff_rank_seed, deterministic,
// seed_process_generator, activation_checkpointing (a list of module paths,
// as mmengine's runner takes it, or {"check_fn": {"type": "ModuleWrapPolicy",
// "module_classes": [...]}, "preserve_rng_state": true}, as its
// FSDPStrategy does); DDPStrategy also model_wrapper and sync_bn;
// FSDPStrategy model_wrapper, sync_bn and state_dict_type (or mmengine's
// state_dict_cfg); ZeroStrategy stage, reduce_bucket_size, overlap_comm,
// contiguous_gradients, state_dict_type and sync_bn.
using StrategyRegistry = registry::Registry<std::shared_ptr<BaseStrategy>>;
StrategyRegistry& strategies();

}  // namespace engine::strategy
