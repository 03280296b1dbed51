#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/compat/autograd.h"
#include "engine/dist/group.h"
#include "engine/model/join/join.h"
#include "engine/model/sharding/flat_unit.h"
#include "engine/model/sharding/unit_schedule.h"
#include "engine/model/unit_call.h"
#include "engine/model/wrappers/fsdp_options.h"
#include "engine/model/wrappers/model_wrapper.h"
#include "engine/optim/grad_norm.h"
#include "engine/optim/grad_sync.h"
#include "engine/optim/step_hook.h"

namespace engine::model {

// Per-rank accounting of the model state the wrapper holds, in bytes.
struct FSDPMemory {
  int64_t sharded_parameters = 0;   // this rank's shards (whole tensors where unsharded)
  int64_t sharded_gradients = 0;    // gradients the optimizer sees
  int64_t unsharded_gradients = 0;  // kept whole between backwards (no_sync)
  int64_t gathered_now = 0;         // full parameters gathered at this moment
  int64_t gathered_peak = 0;        // the most gathered at once since the last reset
  // Freed per-step buffers kept for reuse (sharding::BufferPool: of each
  // size, never more than were once in use together).
  int64_t kept_for_reuse = 0;
};

// mmengine's MMFullyShardedDataParallel, with FSDP2's per-parameter layout.
//
// Construction is collective over the group: the parameters are checked to
// be the same on every rank (names, shapes, dtypes); then, unit by unit,
// deferred ones are initialised (param_init_fn), the unit's parameters
// optionally broadcast (sync_module_states) and each replaced by this
// rank's shard (dim 0, padded). The module's own parameter tensors are
// kept and point at their shards at rest, so an optimizer built afterwards
// over parameters() steps one shard per original parameter, names and
// requires_grad kept (use_orig_params, always). Build the optimizer after
// the wrapper.
//
// Forward gathers the root unit (it stays gathered until the end of
// backward) and every unit the model runs through call_unit as it runs it.
// During backward each unit's gradients are reduce-scattered asynchronously
// as soon as all of them arrived and its backward began, units in a fixed order (the reverse of
// forward order) on every rank; at the end of backward every rank's
// parameters hold their shard and .grad the averaged sharded gradient.
// Gradients are averaged over all ranks: divided by the world size, summed.
//
// Every rank must run the same units in the same order (as PyTorch's FSDP
// requires); a rank that skips a unit another runs gives a collective
// mismatch, not a hang, in the simulator and in debug mode.
//
// Prefetching (backward_prefetch, forward_prefetch) issues a unit's
// all-gather before the unit needs it and lets it run asynchronously while
// the current unit computes; every rank issues the same all-gathers in the
// same order because every rank runs the same units in the same order.
//
// Joinable (engine/model/join), through train_step: a rank that joined
// shadows each iteration of the others by running its own last train_step
// again (its last batch, the same optimizer wrapper) with the loss
// multiplied by zero, so that it makes every collective theirs make, adds
// zeros to their gradients and steps its shard of the optimizer with the
// averaged gradients, as they step theirs; its SyncBatchNorm layers add no
// statistics meanwhile. Parameters and optimizer state stay consistent
// without a copy; once every rank has joined, each takes the buffers of the
// rank that trained longest, as DDP's Join does. A rank that joins before
// its first train_step has no batch to shadow with: InvalidArgument on every
// rank. The optimizer wrapper must outlive the Join. Log values stay per
// rank inside a Join.
class MMFullyShardedDataParallel : public ModelWrapper,
                                   public optim::GradSyncSwitch,
                                   public optim::GradNormSource,
                                   public optim::StepHook,
                                   public UnitCallHandler,
                                   public Joinable {
 public:
  MMFullyShardedDataParallel(std::shared_ptr<BaseModel> module, FSDPOptions options = {});
  ~MMFullyShardedDataParallel() override;

  TensorDict forward(const TensorDict& data, ForwardMode mode) override;
  // preprocess -> forward("loss") -> parse_losses -> update_params, inside
  // the optim wrapper's context (no sync on intermediate accumulation steps,
  // unless the unit scheme reduces every backward).
  TensorDict train_step(const TensorDict& data, optim::OptimWrapper& optim_wrapper) override;
  using BaseModel::train_step;
  TensorDict val_step(const TensorDict& data) override;
  TensorDict test_step(const TensorDict& data) override;

  // Gradients accumulate unsharded, with no communication, while the scope
  // lives; the next synchronised backward reduces them with its own.
  optim::NoSyncScope no_sync() { return optim::NoSyncScope(this); }
  bool grad_sync_enabled() const override { return sync_enabled_; }
  void set_grad_sync_enabled(bool enabled) override { sync_enabled_ = enabled; }

  at::Tensor call(const torch::nn::Module& module,
                  const std::function<at::Tensor()>& body) override;
  double global_power_sum(const std::vector<at::Tensor>& params, double norm_type) override;
  bool any_non_finite(const std::vector<at::Tensor>& params) override;
  // Where units keep whole parameters (MMZeroDataParallel): the optimizer
  // steps this rank's shards, which are then all-gathered.
  void before_step() override;
  void after_step() override;

  const dist::GroupPtr& join_group() const override { return group_; }
  void shadow_iteration(const JoinRound& round) override;
  void finish_join(int last_rank) override;
  bool can_shadow() const override { return shadow_optim_ != nullptr; }

  // Collective over the group: every parameter whole, by its name in the
  // module, gathered one unit at a time (detached copies; the units are
  // left as they were). A tied parameter is listed under each of its names,
  // as PyTorch's state_dict lists it.
  std::map<std::string, at::Tensor> full_parameters();
  // The buffer `name` of the module as a checkpoint holds it: in the dtype
  // it had before buffer_dtype cast it (`value` itself where none did).
  at::Tensor buffer_state(const std::string& name, const at::Tensor& value) const;

  // This rank's piece of every parameter, by its name in the module, for
  // sharded checkpoints (FlatUnit::local_shards: the sharded parameters
  // themselves, else copies). Only between steps, else InvalidArgument.
  std::vector<sharding::LocalShard> local_shards();
  // Collective: the parameters take `shards` (local_shards(), written into).
  void load_local_shards(const std::vector<sharding::LocalShard>& shards);

  // The root unit first, then the others in forward order.
  const std::vector<std::unique_ptr<sharding::FlatUnit>>& units() const { return units_; }
  const FSDPOptions& options() const { return options_; }
  FSDPMemory memory() const;
  // The pool the units' per-step buffers come from (FSDPMemory's
  // kept_for_reuse is its `kept`).
  sharding::BufferPool::Stats buffer_pool_stats() const { return unit_memory_.pool.stats(); }
  void reset_peak_memory() { unit_memory_.meter.peak = unit_memory_.meter.current; }

 protected:
  // How a subclass lays out its units instead of by the wrap policy: the
  // units in forward order (the first stays gathered as the root; reduced
  // in the reverse order), where parameters rest, and whether a unit's
  // reduction starts as soon as its gradients are ready during backward
  // (else all start when backward ends), and whether train_step keeps an
  // accumulation group's intermediate backwards local (no_sync) rather than
  // reducing every backward.
  struct UnitScheme {
    std::function<std::vector<sharding::UnitPlan>(torch::nn::Module&)> plan;
    sharding::Residency residency = sharding::Residency::kSharded;
    bool reduce_during_backward = true;
    bool no_sync_inside_accumulation = true;
  };
  MMFullyShardedDataParallel(std::shared_ptr<BaseModel> module, FSDPOptions options,
                             UnitScheme scheme);

 private:
  template <typename Step>
  TensorDict without_backward(Step step);
  // forward -> parse_losses -> update_params; the loss times zero unless
  // this rank `contributes`.
  TensorDict train_once(const TensorDict& data, optim::OptimWrapper& optim_wrapper,
                        bool contributes);
  void place_on_device();
  // Onto device_id: the buffers, and the parameters unless cpu_offload
  // shards them on the CPU (then only the ignored modules'). Materialised
  // tensors only; a deferred one moves when called again after it is
  // (initialize_deferred makes it on the CPU under cpu_offload).
  void move_device_state();
  // device_id under cpu_offload, when it is not the CPU: where the units'
  // gathered parameters, their gradients and collectives live.
  std::optional<c10::Device> offload_device() const;
  // `before_sharding` sees each unit's parameters, whole, before the unit
  // shards them.
  void build_units(const dist::GroupPtr& group,
                   const std::function<void(const std::vector<NamedParameter>&)>& before_sharding);
  void initialize_deferred(const std::vector<torch::nn::Module*>& modules);
  void cast_buffers();
  TensorDict cast_inputs(const TensorDict& data) const;
  void register_hooks();
  void begin_forward(bool will_backward);
  void count_unreached(const TensorDict& outputs);
  void begin_backward();
  void on_grad_ready(size_t unit);
  void finalize_backward();
  std::vector<std::vector<bool>> agree_on_used() const;

  FSDPOptions options_;
  // What skip_init_weights left as zeros ("name" and how many others),
  // until load_local_shards.
  std::optional<std::string> skipped_init_;
  UnitScheme scheme_;
  sharding::UnitMemory unit_memory_;
  std::vector<std::unique_ptr<sharding::FlatUnit>> units_;
  std::vector<const torch::nn::Module*> unit_modules_;  // units_[i]'s module
  // Per unit, the trainable parameters the last forward's outputs do not
  // reach (counted only where units reduce during backward).
  std::vector<size_t> unreached_;
  std::unique_ptr<sharding::UnitMoves> moves_;
  std::unique_ptr<sharding::UnitSchedule> schedule_;
  std::vector<compat::NodePtr> hooked_;  // one per hook key
  std::vector<uintptr_t> hook_keys_;
  bool sync_enabled_ = true;
  bool backward_sync_ = true;
  dist::GroupPtr group_;
  dist::GroupPtr sharded_norm_group_;                    // where sharded power sums are reduced
  std::map<std::string, at::ScalarType> buffer_dtypes_;  // before buffer_dtype cast them
  // Under a Join: this rank's last train_step, which a shadow iteration
  // runs again.
  bool joining_ = false;
  TensorDict shadow_batch_;
  optim::OptimWrapper* shadow_optim_ = nullptr;
};

}  // namespace engine::model
