#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/compat/autograd.h"
#include "engine/dist/group.h"
#include "engine/dist/work.h"
#include "engine/model/named_parameter.h"
#include "engine/model/sharding/buffer_pool.h"
#include "engine/model/sharding/shard_layout.h"

namespace engine::model::sharding {

// The groups a unit's parameters live on. Parameters are sharded over
// `shard` (nullptr: this rank alone, the parameters stay whole) and
// replicated over `replica` (nullptr: no replicas). A gradient is the mean
// over `world_size` ranks: divided by it, then summed over both groups.
struct UnitGroups {
  dist::GroupPtr shard;
  dist::GroupPtr replica;
  int world_size = 1;
};

// Bytes of gathered parameters a wrapper holds now, and the most it held.
struct GatheredMeter {
  int64_t current = 0;
  int64_t peak = 0;
  void add(int64_t bytes);
  void remove(int64_t bytes);
};

// What a wrapper's units share: the meter of their gathered parameters and
// the pool their per-step buffers come from.
struct UnitMemory {
  GatheredMeter meter;
  BufferPool pool;
};

// Where a unit's parameters live between optimizer steps.
//   kSharded  only this rank's shard (FSDP): gathered for forward and
//             backward, freed after
//   kWhole    whole on every rank (ZeRO stages 1-2): the shard exists only
//             while the optimizer steps it, then the unit is all-gathered
enum class Residency { kSharded, kWhole };

// How the gathered parameters differ from the shards (kSharded only).
//   dtype         the dtype the gathered parameters take for forward and
//                 backward (mixed precision: the shard is cast before the
//                 all-gather, so the gather moves that dtype)
//   reduce_dtype  the dtype gradients are reduced in (unset: dtype)
//   device        CPU offload: the shards, and the gradients the optimizer
//                 sees, rest on the CPU; the gathered parameters, their
//                 gradients and the unit's collectives live on this device
//                 (the shard is copied there for each gather, the reduced
//                 shard back)
// Unset: the parameters' own dtype and device. The shards, and the
// gradients the optimizer sees, always stay in the parameters' own dtype.
struct UnitCompute {
  std::optional<at::ScalarType> dtype;
  std::optional<at::ScalarType> reduce_dtype;
  std::optional<c10::Device> device;
};

// One sharding unit: parameters that are gathered together in one
// all-gather and whose gradients are reduced together in one
// reduce-scatter, each laid out as ShardLayout says, end to end in a flat
// buffer of block_numel() elements per rank.
//
// kSharded: at rest every parameter's data is its shard (a view into the unit's flat
// shard, so the optimizer steps the shards in place and sees one tensor per
// original parameter) and its .grad the sharded gradient. gather() points the
// parameters at full tensors; reshard() points them back and frees the full
// tensors' storage (views saved by autograd keep the storage object, which
// the next gather fills again, as FSDP's storage resizing does).
//
// The gradient side: expose_unsharded_grads() before a backward hands the
// parameters their full-size gradients (kept across no_sync backwards),
// launch_reduce_scatter() packs them and starts the reduce-scatter,
// finish_reduce_scatter() adds the result into the sharded gradients of the
// parameters some rank had a gradient for, and
// keep_unsharded_grads() ends a backward without communication.
//
// Collective calls (gather, launch_reduce_scatter, finish_reduce_scatter)
// must come in the same order on every rank of the unit's groups. Not
// thread-safe.
class FlatUnit {
 public:
  // Collective-free: takes each parameter's current (full) data as the
  // values to shard. All parameters share one dtype and device, else
  // InvalidArgument naming the unit.
  // kWhole needs contiguous parameters and no UnitCompute (InvalidArgument
  // otherwise).
  FlatUnit(std::string name, std::vector<NamedParameter> params, UnitGroups groups,
           UnitMemory* memory, Residency residency = Residency::kSharded, UnitCompute compute = {});
  ~FlatUnit();
  FlatUnit(const FlatUnit&) = delete;
  FlatUnit& operator=(const FlatUnit&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<NamedParameter>& parameters() const { return params_; }
  const ShardLayout& layout(size_t param) const { return layouts_[param]; }
  const UnitGroups& groups() const { return groups_; }
  bool sharded() const { return shard_size_ > 1; }
  int shard_rank() const { return shard_rank_; }
  bool gathered() const { return gathered_; }
  Residency residency() const { return residency_; }
  int64_t block_numel() const { return block_numel_; }
  // Whether gather() gives the parameters another dtype or device (mixed
  // precision, CPU offload).
  bool converts() const;
  // Bytes of this rank's shards held now, of the gathered parameters (in
  // the compute dtype), and of the unsharded gradients kept for a later
  // reduction (no_sync).
  int64_t shard_bytes() const;
  int64_t full_bytes() const;
  int64_t unsharded_grad_bytes() const;

  // The gradient accumulators of the trainable parameters, in order, made
  // anew for the gathered form (full shape, compute dtype and device), which
  // gradients arrive in; the unit's own swaps between forms keep them. Hook
  // them here: set_data would drop them at a change of dtype or device.
  std::vector<compat::NodePtr> grad_accumulators();

  // Parameters whole, in the compute dtype and device (a no-op where they
  // already are: unsharded and not converted, or kWhole). start_gather()
  // issues the all-gather and returns (a prefetch; its buffers count as
  // gathered from then on); gather() finishes a started one or does the
  // whole gather.
  void start_gather();
  void gather();
  // Gathered, or its all-gather in flight.
  bool gather_started() const { return gathered_ || gather_work_ != nullptr; }
  // Finishes an all-gather in flight, then frees the full parameters.
  void reshard();
  // Collective: every parameter whole, in its own dtype, as fresh tensors
  // (the unit is left as it was, gathered or not).
  std::vector<at::Tensor> full_values() const;
  // kWhole only (no-ops otherwise); enter_step is collective-free,
  // leave_step collective.
  void enter_step();
  void leave_step();

  // This rank's chunk of each parameter: the parameters themselves for
  // kSharded (nothing may be gathered: InvalidArgument), copies for kWhole.
  std::vector<LocalShard> local_shards() const;
  // Makes the unit's parameters hold `shards` (local_shards()' entries for
  // this unit, in its order, possibly written into). Collective for kWhole.
  void load_local_shards(const std::vector<LocalShard>& shards);

  void expose_unsharded_grads();
  void launch_reduce_scatter();
  // Waits for the reduce-scatter launch_reduce_scatter() started, which
  // frees the packed gradients it read. Without a replica group the result
  // is then final: it is added at once where this rank had a gradient (so
  // some rank had), and the reduced block goes unless a parameter without
  // one waits for finish_reduce_scatter's `used`. Collective-free;
  // finish_reduce_scatter() does it when it was not done before.
  void await_reduction();
  // Which parameters had a gradient when the reduction was launched.
  const std::vector<bool>& had_grads() const { return had_grads_; }
  // `used[i]`: whether any rank had parameter i's gradient; the others keep
  // their sharded gradient as it was (undefined until first used, as in one
  // process, so that an optimizer skips them alike).
  void finish_reduce_scatter(const std::vector<bool>& used);
  void keep_unsharded_grads();

  // What a rank holds between backwards inside an accumulation group, per
  // parameter (undefined where nothing): the sharded gradient the optimizer
  // will see, and the unsharded one that no_sync backwards kept.
  struct PendingGrads {
    std::vector<at::Tensor> sharded;
    std::vector<at::Tensor> unsharded;
  };
  PendingGrads pending_grads() const;
  void restore_pending_grads(PendingGrads grads);

  // This rank's (sharded) gradients of those of `params` that are members
  // of this unit, in the unit's order; others are ignored.
  std::vector<at::Tensor> grads_of(const std::vector<at::Tensor>& params) const;

 private:
  void allocate_full(size_t param);
  void free_full(size_t param);
  at::Tensor shard_view_of(size_t param) const;  // flat, in flat_shard_
  // `t` itself when it has `options`' dtype and device, else a copy there
  // from the pool.
  at::Tensor in_pool(const at::Tensor& t, const at::TensorOptions& options) const;
  void point_at_shards();
  at::Tensor gathered_blocks(const at::Tensor& flat_shard) const;  // [shards, block_numel]
  void unshard_from(const at::Tensor& blocks);
  void finish_gather();
  void unshard();
  void restore_shard_grads();
  // Adds the reduced block's piece into the sharded gradient of each
  // trainable parameter i with wanted[i] not added yet; frees the block once
  // every trainable parameter's piece is added.
  void add_reduced(const std::vector<bool>& wanted);

  std::string name_;
  std::vector<NamedParameter> params_;
  UnitGroups groups_;
  UnitMemory* memory_;
  Residency residency_;
  at::TensorOptions master_options_;   // the shards': the parameters' own dtype, at rest
  at::TensorOptions compute_options_;  // the gathered parameters'
  at::ScalarType reduce_dtype_ = at::kFloat;
  int shard_size_ = 1;
  int shard_rank_ = 0;
  std::vector<ShardLayout> layouts_;
  std::vector<int64_t> offsets_;
  int64_t block_numel_ = 0;
  at::Tensor flat_shard_;
  std::vector<at::Tensor> full_;  // storage allocated only while gathered
  bool gathered_ = false;
  // The all-gather start_gather() issued, its input and its output.
  dist::WorkPtr gather_work_;
  at::Tensor gather_input_;
  at::Tensor gather_blocks_;
  bool grads_exposed_ = false;
  std::vector<at::Tensor> shard_grads_;
  std::vector<at::Tensor> unsharded_grads_;
  std::vector<bool> had_grads_;
  std::vector<bool> added_;  // whose piece of reduced_ is in its sharded gradient
  at::Tensor reduced_;
  dist::WorkPtr reduction_;
};

}  // namespace engine::model::sharding
