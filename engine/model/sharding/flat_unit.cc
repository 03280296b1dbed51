#include "engine/model/sharding/flat_unit.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>

#include "engine/dist/collectives.h"
#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/optim/grad_norm.h"

namespace engine::model::sharding {
namespace {

void check_one_dtype_and_device(const std::string& unit,
                                const std::vector<NamedParameter>& params) {
  for (const auto& param : params) {
    const at::Tensor& first = params.front().tensor;
    if (param.tensor.scalar_type() == first.scalar_type() &&
        param.tensor.device() == first.device()) {
      continue;
    }
    throw dist::InvalidArgument(dist::on_rank(
        dist::get_rank(), "sharding unit \"" + unit +
                              "\" mixes parameters of different dtype or "
                              "device (\"" +
                              params.front().name + "\" and \"" + param.name +
                              "\"); one flat buffer carries a unit: put them in different units"));
  }
}

void check_contiguous(const std::string& unit, const std::vector<NamedParameter>& params) {
  for (const auto& param : params) {
    if (param.tensor.is_contiguous()) continue;
    throw dist::InvalidArgument(dist::on_rank(
        dist::get_rank(), "sharding unit \"" + unit + "\": parameter \"" + param.name +
                              "\" is not contiguous; whole parameters are gathered in place, so "
                              "make it contiguous before wrapping"));
  }
}

void check_compute(const std::string& unit, Residency residency, const UnitCompute& compute) {
  if (residency == Residency::kSharded ||
      (!compute.dtype && !compute.reduce_dtype && !compute.device)) {
    return;
  }
  throw dist::InvalidArgument(dist::on_rank(
      dist::get_rank(),
      "sharding unit \"" + unit +
          "\" keeps whole parameters (ZeRO stages 1-2), which have no mixed precision or CPU "
          "offload here; use FSDP (ZeRO stage 3) for param_dtype/reduce_dtype/cpu_offload"));
}

// set_data without its reset of the gradient accumulator, which it drops
// whenever the dtype changes (mixed precision): the accumulator is made once
// for the gathered form, the form gradients arrive in, and it is where the
// wrapper's hooks sit. Both are plain dense TensorImpls, as set_data checks.
void swap_data(const at::Tensor& param, const at::Tensor& data) {
  param.unsafeGetTensorImpl()->shallow_copy_from(data.getIntrusivePtr());
}

}  // namespace

void GatheredMeter::add(int64_t bytes) {
  current += bytes;
  peak = std::max(peak, current);
}

void GatheredMeter::remove(int64_t bytes) { current -= bytes; }

FlatUnit::FlatUnit(std::string name, std::vector<NamedParameter> params, UnitGroups groups,
                   UnitMemory* memory, Residency residency, UnitCompute compute)
    : name_(std::move(name)),
      params_(std::move(params)),
      groups_(std::move(groups)),
      memory_(memory),
      residency_(residency) {
  if (params_.empty()) return;
  check_one_dtype_and_device(name_, params_);
  check_compute(name_, residency_, compute);
  if (residency_ == Residency::kWhole) check_contiguous(name_, params_);
  const at::Tensor& first = params_.front().tensor;
  master_options_ = first.options().requires_grad(false);
  if (compute.device) master_options_ = master_options_.device(at::kCPU);
  compute_options_ = master_options_.dtype(compute.dtype.value_or(first.scalar_type()))
                         .device(compute.device.value_or(first.device()));
  reduce_dtype_ = compute.reduce_dtype.value_or(compute_options_.dtype().toScalarType());
  if (groups_.shard) {
    shard_size_ = groups_.shard->size();
    shard_rank_ = groups_.shard->rank();
  }
  for (const auto& param : params_) {
    layouts_.push_back(shard_layout(param.tensor.sizes(), shard_size_));
    offsets_.push_back(block_numel_);
    block_numel_ += layouts_.back().shard_numel();
  }
  shard_grads_.resize(params_.size());
  unsharded_grads_.resize(params_.size());
  if (residency_ == Residency::kWhole) {
    for (const auto& param : params_) full_.push_back(param.tensor.variable_data());
    gathered_ = true;
    memory_->meter.add(full_bytes());
    return;
  }
  flat_shard_ = at::empty({block_numel_}, master_options_);
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    copy_shard(params_[i].tensor.detach(), layouts_[i], shard_rank_, shard_view_of(i));
    full_.push_back(at::empty(params_[i].tensor.sizes(), compute_options_));
    free_full(i);
  }
  point_at_shards();
}

FlatUnit::~FlatUnit() {
  // A prefetch still in flight (an exception left it) writes into buffers
  // this unit owns: let it land first. A failure here was reported already.
  try {
    finish_gather();
  } catch (const std::exception&) {
  }
  if (gathered_) memory_->meter.remove(full_bytes());
}

bool FlatUnit::converts() const {
  return !params_.empty() && !(compute_options_.dtype() == master_options_.dtype() &&
                               compute_options_.device() == master_options_.device());
}

int64_t FlatUnit::shard_bytes() const {
  return flat_shard_.defined() ? flat_shard_.numel() * flat_shard_.element_size() : 0;
}

int64_t FlatUnit::unsharded_grad_bytes() const {
  int64_t bytes = 0;
  for (const auto& grad : unsharded_grads_) {
    if (grad.defined()) bytes += grad.numel() * static_cast<int64_t>(grad.element_size());
  }
  return bytes;
}

int64_t FlatUnit::full_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    bytes += layouts_[i].full_numel() * static_cast<int64_t>(full_[i].element_size());
  }
  return bytes;
}

void FlatUnit::allocate_full(size_t param) {
  c10::StorageImpl* storage = full_[param].storage().unsafeGetStorageImpl();
  const size_t bytes = layouts_[param].full_numel() * full_[param].element_size();
  storage->set_data_ptr_noswap(memory_->pool.allocate(bytes, full_[param].device()));
  storage->set_nbytes(bytes);
}

void FlatUnit::free_full(size_t param) { full_[param].storage().unsafeGetStorageImpl()->reset(); }

at::Tensor FlatUnit::shard_view_of(size_t param) const {
  return flat_shard_.narrow(0, offsets_[param], layouts_[param].shard_numel());
}

void FlatUnit::point_at_shards() {
  for (size_t i = 0; i < params_.size(); ++i) {
    swap_data(params_[i].tensor, shard_view_of(i).view(layouts_[i].shard_sizes()));
  }
  gathered_ = false;
}

at::Tensor FlatUnit::gathered_blocks(const at::Tensor& flat_shard) const {
  if (!sharded()) return flat_shard.view({1, block_numel_});
  at::Tensor blocks = memory_->pool.empty({shard_size_, block_numel_}, flat_shard.options());
  dist::all_gather_into_tensor(blocks, flat_shard, groups_.shard);
  return blocks;
}

void FlatUnit::unshard_from(const at::Tensor& blocks) {
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    copy_from_blocks(blocks, offsets_[i], layouts_[i], full_[i].view({-1}));
    swap_data(params_[i].tensor, full_[i]);
  }
  gathered_ = true;
}

void FlatUnit::unshard() { unshard_from(gathered_blocks(in_pool(flat_shard_, compute_options_))); }

at::Tensor FlatUnit::in_pool(const at::Tensor& t, const at::TensorOptions& options) const {
  if (t.dtype() == options.dtype() && t.device() == options.device()) return t;
  return memory_->pool.empty(t.sizes(), t.options().dtype(options.dtype()).device(options.device()))
      .copy_(t);
}

std::vector<compat::NodePtr> FlatUnit::grad_accumulators() {
  std::vector<compat::NodePtr> accumulators;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& param = params_[i].tensor;
    if (!param.requires_grad()) continue;
    compat::forget_grad_accumulator(param);
    // Only the gathered form's metadata is read: its storage stays unallocated.
    if (!gathered_) swap_data(param, full_[i]);
    accumulators.push_back(torch::autograd::impl::grad_accumulator(param));
  }
  if (!gathered_) point_at_shards();
  return accumulators;
}

void FlatUnit::start_gather() {
  if (gather_started() || (!sharded() && !converts())) return;
  for (size_t i = 0; i < params_.size(); ++i) allocate_full(i);
  memory_->meter.add(full_bytes());
  if (!sharded()) {
    unshard();
    return;
  }
  // The cast copy is the all-gather's input: it lives until the gather ends.
  gather_input_ = in_pool(flat_shard_, compute_options_);
  gather_blocks_ = memory_->pool.empty({shard_size_, block_numel_}, gather_input_.options());
  gather_work_ = dist::all_gather_into_tensor_async(gather_blocks_, gather_input_, groups_.shard);
}

void FlatUnit::gather() {
  start_gather();
  finish_gather();
}

void FlatUnit::finish_gather() {
  if (!gather_work_) return;
  const dist::WorkPtr work = std::move(gather_work_);
  work->wait();
  gather_input_ = at::Tensor();
  unshard_from(gather_blocks_);
  gather_blocks_ = at::Tensor();
}

void FlatUnit::reshard() {
  finish_gather();  // an all-gather in flight lands before its buffers go
  if (!gathered_ || residency_ == Residency::kWhole) return;
  point_at_shards();
  for (size_t i = 0; i < params_.size(); ++i) free_full(i);
  memory_->meter.remove(full_bytes());
}

std::vector<at::Tensor> FlatUnit::full_values() const {
  std::vector<at::Tensor> values;
  if (!flat_shard_.defined()) {  // kWhole between steps: the parameters are the values
    for (const auto& full : full_) values.push_back(full.clone());
    return values;
  }
  // Gathered where the unit's collectives run, in the shards' own dtype.
  const at::Tensor blocks =
      gathered_blocks(in_pool(flat_shard_, master_options_.device(compute_options_.device())));
  for (size_t i = 0; i < params_.size(); ++i) {
    values.push_back(at::empty(layouts_[i].full_sizes, master_options_));
    copy_from_blocks(blocks, offsets_[i], layouts_[i], values.back().view({-1}));
  }
  return values;
}

void FlatUnit::enter_step() {
  if (residency_ != Residency::kWhole || !sharded() || !gathered_) return;
  flat_shard_ = memory_->pool.empty({block_numel_}, full_.front().options());
  for (size_t i = 0; i < params_.size(); ++i) {
    copy_shard(full_[i], layouts_[i], shard_rank_, shard_view_of(i));
  }
  point_at_shards();
}

void FlatUnit::leave_step() {
  if (residency_ != Residency::kWhole || !sharded() || gathered_) return;
  unshard();
  flat_shard_ = at::Tensor();
}

std::vector<LocalShard> FlatUnit::local_shards() const {
  if (residency_ == Residency::kSharded && gather_started()) {
    throw dist::InvalidArgument(dist::on_rank(
        dist::get_rank(), "sharding unit \"" + name_ +
                              "\" is gathered; take the shards between steps, not inside one"));
  }
  std::vector<LocalShard> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor data = params_[i].tensor;
    if (residency_ == Residency::kWhole && gathered_) {
      data = at::empty(layouts_[i].shard_sizes(), full_[i].options());
      copy_shard(full_[i], layouts_[i], shard_rank_, data.view({-1}));
    }
    out.push_back({params_[i].name, layouts_[i], shard_rank_, data});
  }
  return out;
}

void FlatUnit::load_local_shards(const std::vector<LocalShard>& shards) {
  enter_step();
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!shards[i].data.is_same(params_[i].tensor)) params_[i].tensor.copy_(shards[i].data);
  }
  leave_step();
}

void FlatUnit::expose_unsharded_grads() {
  if (grads_exposed_) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& grad = params_[i].tensor.mutable_grad();
    shard_grads_[i] = grad;
    grad = unsharded_grads_[i];
  }
  grads_exposed_ = true;
}

void FlatUnit::launch_reduce_scatter() {
  if (params_.empty()) return;
  at::Tensor blocks =
      memory_->pool.empty({shard_size_, block_numel_}, compute_options_.dtype(reduce_dtype_))
          .zero_();
  had_grads_.assign(params_.size(), false);
  added_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& grad = params_[i].tensor.grad();
    had_grads_[i] = grad.defined();
    if (grad.defined()) copy_into_blocks(grad.reshape({-1}), offsets_[i], layouts_[i], blocks);
    params_[i].tensor.mutable_grad() = at::Tensor();
    unsharded_grads_[i] = at::Tensor();
  }
  blocks.div_(groups_.world_size);
  reduced_ = memory_->pool.empty({block_numel_}, blocks.options());
  if (sharded()) {
    reduction_ = dist::reduce_scatter_tensor_async(reduced_, blocks, "sum", groups_.shard);
  } else {
    reduced_.copy_(blocks[0]);
  }
}

void FlatUnit::await_reduction() {
  if (!reduction_) return;
  reduction_->wait();
  reduction_.reset();
  if (!groups_.replica) add_reduced(had_grads_);
}

void FlatUnit::finish_reduce_scatter(const std::vector<bool>& used) {
  if (params_.empty()) return;
  await_reduction();
  if (groups_.replica) dist::all_reduce(reduced_, "sum", groups_.replica);
  add_reduced(used);
  reduced_ = at::Tensor();
  restore_shard_grads();
}

void FlatUnit::add_reduced(const std::vector<bool>& wanted) {
  if (!reduced_.defined()) return;
  const at::Tensor reduced = in_pool(reduced_, reduced_.options().device(master_options_.device()));
  // Shaped as the parameters are when the optimizer steps them: shards,
  // except where a whole unit stays whole (a 0-dim shard is [1]).
  const bool stays_whole = residency_ == Residency::kWhole && !sharded();
  bool all_added = true;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].tensor.requires_grad() || added_[i]) continue;
    if (!wanted[i]) {
      all_added = false;
      continue;
    }
    const at::Tensor piece =
        reduced.narrow(0, offsets_[i], layouts_[i].shard_numel())
            .view(stays_whole ? layouts_[i].full_sizes : layouts_[i].shard_sizes());
    if (shard_grads_[i].defined()) {
      shard_grads_[i].add_(piece);
    } else {
      shard_grads_[i] = memory_->pool.empty(piece.sizes(), master_options_).copy_(piece);
    }
    added_[i] = true;
  }
  if (all_added) reduced_ = at::Tensor();
}

void FlatUnit::keep_unsharded_grads() {
  for (size_t i = 0; i < params_.size(); ++i) unsharded_grads_[i] = params_[i].tensor.grad();
  restore_shard_grads();
}

void FlatUnit::restore_shard_grads() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].tensor.mutable_grad() = shard_grads_[i];
  grads_exposed_ = false;
}

FlatUnit::PendingGrads FlatUnit::pending_grads() const {
  PendingGrads grads;
  for (size_t i = 0; i < params_.size(); ++i) {
    grads.sharded.push_back(params_[i].tensor.grad());
    grads.unsharded.push_back(unsharded_grads_[i]);
  }
  return grads;
}

void FlatUnit::restore_pending_grads(PendingGrads grads) {
  for (size_t i = 0; i < params_.size(); ++i) {
    shard_grads_[i] = std::move(grads.sharded[i]);
    unsharded_grads_[i] = std::move(grads.unsharded[i]);
  }
  restore_shard_grads();
}

std::vector<at::Tensor> FlatUnit::grads_of(const std::vector<at::Tensor>& params) const {
  std::vector<at::Tensor> grads;
  for (const auto& param : params_) {
    const bool asked = std::any_of(params.begin(), params.end(),
                                   [&](const at::Tensor& p) { return p.is_same(param.tensor); });
    if (asked) grads.push_back(param.tensor.grad());
  }
  return grads;
}

}  // namespace engine::model::sharding
