#include "engine/model/wrappers/fully_sharded_data_parallel.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tensor.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "engine/dist/collectives.h"
#include "engine/dist/errors.h"
#include "engine/dist/helpers.h"
#include "engine/dist/info.h"
#include "engine/model/init/deferred.h"
#include "engine/model/named_parameter.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/model/wrappers/hybrid_groups.h"
#include "engine/model/wrappers/parameter_sync.h"
#include "engine/model/wrappers/reducer.h"
#include "engine/optim/optim_wrapper.h"

namespace engine::model {
namespace {

constexpr const char* kFsdpWrapper = "MMFullyShardedDataParallel";

// The schedule's moves on the wrapper's units.
class FlatUnitMoves : public sharding::UnitMoves {
 public:
  explicit FlatUnitMoves(const std::vector<std::unique_ptr<sharding::FlatUnit>>& units)
      : units_(units) {}
  void gather(size_t unit) override { units_[unit]->gather(); }
  void start_gather(size_t unit) override { units_[unit]->start_gather(); }
  bool gather_started(size_t unit) const override { return units_[unit]->gather_started(); }
  void reshard(size_t unit) override { units_[unit]->reshard(); }
  void launch_reduction(size_t unit) override { units_[unit]->launch_reduce_scatter(); }
  void await_reduction(size_t unit) override { units_[unit]->await_reduction(); }

 private:
  const std::vector<std::unique_ptr<sharding::FlatUnit>>& units_;
};

std::vector<at::Tensor> tensors_of(const std::vector<NamedParameter>& params) {
  std::vector<at::Tensor> tensors;
  for (const auto& param : params) tensors.push_back(param.tensor);
  return tensors;
}

// The modules under `root` (itself included), in registration order.
std::vector<torch::nn::Module*> modules_of(torch::nn::Module& root) {
  std::vector<torch::nn::Module*> modules = {&root};
  for (const auto& module : root.modules(/*include_self=*/false)) modules.push_back(module.get());
  return modules;
}

// The modules holding `params` themselves, in registration order.
std::vector<torch::nn::Module*> owners_of(torch::nn::Module& root,
                                          const std::vector<NamedParameter>& params) {
  std::unordered_set<const c10::TensorImpl*> wanted;
  for (const auto& param : params) wanted.insert(param.tensor.unsafeGetTensorImpl());
  std::vector<torch::nn::Module*> owners;
  for (auto* module : modules_of(root)) {
    for (const auto& param : module->parameters(/*recurse=*/false)) {
      if (wanted.count(param.unsafeGetTensorImpl())) {
        owners.push_back(module);
        break;
      }
    }
  }
  return owners;
}

std::vector<NamedParameter> all_parameters(torch::nn::Module& module) {
  return unique_named_parameters(module);
}

}  // namespace

MMFullyShardedDataParallel::MMFullyShardedDataParallel(std::shared_ptr<BaseModel> module,
                                                       FSDPOptions options)
    : MMFullyShardedDataParallel(std::move(module), std::move(options), UnitScheme{}) {}

MMFullyShardedDataParallel::MMFullyShardedDataParallel(std::shared_ptr<BaseModel> module,
                                                       FSDPOptions options, UnitScheme scheme)
    : ModelWrapper(std::move(module)), options_(std::move(options)), scheme_(std::move(scheme)) {
  group_ = wrapper_group(options_.process_group, kFsdpWrapper);
  const dist::GroupPtr& group = group_;
  verify_same_parameters(all_parameters(this->module()), group);
  place_on_device();
  build_units(group, [&](const std::vector<NamedParameter>& params) {
    initialize_deferred(owners_of(this->module(), params));
    move_device_state();  // before a unit of ignored modules views them
    if (options_.sync_module_states) broadcast_from_rank(tensors_of(params), group);
  });
  initialize_deferred(modules_of(this->module()));  // modules holding deferred buffers only
  move_device_state();
  if (options_.sync_module_states) broadcast_buffers(this->module(), group);
  cast_buffers();
  register_hooks();
  for (size_t u = 1; u < units_.size(); ++u) {
    if (unit_modules_[u]) attach_unit_handler(unit_modules_[u], this);
  }
  optim::attach_grad_sync(this, this);
  optim::attach_grad_sync(&this->module(), this);
  for (const auto& unit : units_) {
    for (const auto& param : unit->parameters()) {
      optim::attach_grad_norm_source(param.tensor, this);
      if (scheme_.residency == sharding::Residency::kWhole)
        optim::attach_step_hook(param.tensor, this);
    }
  }
}

MMFullyShardedDataParallel::~MMFullyShardedDataParallel() {
  for (size_t i = 0; i < hooked_.size(); ++i) hooked_[i]->del_post_hook(hook_keys_[i]);
  for (size_t u = 1; u < units_.size(); ++u) {
    if (unit_modules_[u]) detach_unit_handler(unit_modules_[u]);
  }
  optim::detach_grad_sync(this);
  optim::detach_grad_sync(&module());
  for (const auto& unit : units_) {
    for (const auto& param : unit->parameters()) {
      optim::detach_grad_norm_source(param.tensor);
      if (scheme_.residency == sharding::Residency::kWhole) optim::detach_step_hook(param.tensor);
    }
  }
}

void MMFullyShardedDataParallel::place_on_device() {
  const int rank = group_->my_global_rank();
  const auto& device = options_.device_id;
  if (device && device->is_cuda() && !at::hasCUDA()) {
    throw dist::InvalidArgument(dist::on_rank(
        rank, std::string(kFsdpWrapper) + ": device_id is " + device->str() +
                  " but this process has no CUDA device; leave device_id unset to train on "
                  "the CPU"));
  }
  const auto deferred = init::deferred_names(module());
  if (options_.skip_init_weights && options_.param_init_fn) {
    throw dist::InvalidArgument(dist::on_rank(
        rank, std::string(kFsdpWrapper) +
                  ": skip_init_weights leaves the weights to a checkpoint and param_init_fn "
                  "initialises them; give one of the two"));
  }
  if (options_.skip_init_weights && !deferred.empty()) {
    skipped_init_ = "\"" + deferred.front() + "\" and " + std::to_string(deferred.size() - 1) +
                    " other tensor(s)";
  }
  if (!deferred.empty() && !options_.param_init_fn && !options_.skip_init_weights) {
    throw dist::InvalidArgument(dist::on_rank(
        rank, std::string(kFsdpWrapper) + ": \"" + deferred.front() + "\" and " +
                  std::to_string(deferred.size() - 1) +
                  " other tensor(s) of the module are deferred (meta) and nothing initialises "
                  "them; give param_init_fn"));
  }
  if (!device) return;
  // "cuda" alone: the current device, as a tensor made there reports it.
  if (!device->has_index()) options_.device_id = at::empty({0}, *device).device();
  move_device_state();
}

void MMFullyShardedDataParallel::move_device_state() {
  const auto& device = options_.device_id;
  if (!device) return;
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> state;
  if (options_.cpu_offload) {
    // The units' parameters are sharded onto the CPU from where they are.
    for (const auto* ignored : options_.ignored_modules) {
      for (const auto& param : ignored->parameters()) state.push_back(param);
    }
  } else {
    state = module().parameters();
  }
  for (const auto& buffer : module().buffers()) state.push_back(buffer);
  for (auto& tensor : state) {
    if (!tensor.is_meta() && tensor.device() != *device) tensor.set_data(tensor.to(*device));
  }
}

std::optional<c10::Device> MMFullyShardedDataParallel::offload_device() const {
  if (!options_.cpu_offload || !options_.device_id || options_.device_id->is_cpu()) {
    return std::nullopt;
  }
  return options_.device_id;
}

void MMFullyShardedDataParallel::initialize_deferred(
    const std::vector<torch::nn::Module*>& modules) {
  const c10::Device device =
      options_.cpu_offload ? c10::Device(c10::kCPU) : options_.device_id.value_or(c10::kCPU);
  for (auto* module : modules) {
    if (init::materialize(*module, device) && options_.param_init_fn) {
      options_.param_init_fn(*module);
    }
  }
}

void MMFullyShardedDataParallel::build_units(
    const dist::GroupPtr& group,
    const std::function<void(const std::vector<NamedParameter>&)>& before_sharding) {
  sharding::UnitGroups replicated{nullptr, group, group->size()};
  sharding::UnitGroups sharded{group, nullptr, group->size()};
  if (options_.sharding_strategy == ShardingStrategy::kNoShard) sharded = replicated;
  if (options_.sharding_strategy == ShardingStrategy::kHybridShard) {
    std::tie(sharded.shard, sharded.replica) =
        hybrid_groups(group, options_.hybrid_shard_size, kFsdpWrapper);
  }
  sharded_norm_group_ = sharded.shard;
  auto plans = scheme_.plan ? scheme_.plan(module())
                            : sharding::plan_units(module(), options_.auto_wrap_policy,
                                                   options_.ignored_modules);
  const sharding::UnitCompute compute{options_.mixed_precision.param_dtype,
                                      options_.mixed_precision.reduce_dtype, offload_device()};
  for (auto& plan : plans) {
    before_sharding(plan.params);
    units_.push_back(std::make_unique<sharding::FlatUnit>(
        plan.name, std::move(plan.params), sharded, &unit_memory_, scheme_.residency, compute));
    unit_modules_.push_back(plan.module);
  }
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (const auto& item : module().named_parameters()) {
    names[item.value().unsafeGetTensorImpl()] = item.key();
  }
  std::vector<NamedParameter> ignored;
  for (const auto* owner : options_.ignored_modules) {
    for (const auto& param : owner->parameters()) {
      ignored.push_back({names.at(param.unsafeGetTensorImpl()), param});
    }
  }
  if (!ignored.empty()) {
    before_sharding(ignored);
    units_.push_back(std::make_unique<sharding::FlatUnit>("(ignored modules)", std::move(ignored),
                                                          replicated, &unit_memory_));
    unit_modules_.push_back(nullptr);
  }
  std::vector<sharding::ScheduledUnit> scheduled;
  for (size_t u = 0; u < units_.size(); ++u) {
    size_t trainable = 0;
    for (const auto& param : units_[u]->parameters()) trainable += param.tensor.requires_grad();
    scheduled.push_back({.trainable = trainable,
                         .has_frozen = trainable < units_[u]->parameters().size(),
                         .called = unit_modules_[u] != nullptr});
  }
  const bool reshard_after_forward = options_.sharding_strategy == ShardingStrategy::kFullShard ||
                                     options_.sharding_strategy == ShardingStrategy::kHybridShard;
  moves_ = std::make_unique<FlatUnitMoves>(units_);
  schedule_ = std::make_unique<sharding::UnitSchedule>(
      std::move(scheduled),
      sharding::ScheduleOptions{.backward_prefetch = options_.backward_prefetch,
                                .forward_prefetch = options_.forward_prefetch,
                                .limit_all_gathers = options_.limit_all_gathers,
                                .reshard_after_forward = reshard_after_forward},
      *moves_);
  unreached_.assign(units_.size(), 0);
}

void MMFullyShardedDataParallel::cast_buffers() {
  const auto dtype = options_.mixed_precision.buffer_dtype;
  if (!dtype) return;
  c10::NoGradGuard no_grad;
  for (const auto& item : module().named_buffers()) {
    at::Tensor buffer = item.value();
    if (!at::isFloatingType(buffer.scalar_type()) || buffer.scalar_type() == *dtype) continue;
    buffer_dtypes_[item.key()] = buffer.scalar_type();
    buffer.set_data(buffer.to(*dtype));
  }
}

at::Tensor MMFullyShardedDataParallel::buffer_state(const std::string& name,
                                                    const at::Tensor& value) const {
  const auto found = buffer_dtypes_.find(name);
  return found == buffer_dtypes_.end() ? value : value.to(found->second);
}

TensorDict MMFullyShardedDataParallel::cast_inputs(const TensorDict& data) const {
  const auto dtype = options_.mixed_precision.param_dtype;
  const auto device = offload_device();
  if (!dtype && !device) return data;
  TensorDict cast;
  for (const auto& [key, value] : data) {
    if (!value.defined()) {
      cast[key] = value;
      continue;
    }
    at::Tensor moved = device ? value.to(*device) : value;
    cast[key] = dtype && at::isFloatingType(value.scalar_type()) ? moved.to(*dtype) : moved;
  }
  return cast;
}

void MMFullyShardedDataParallel::register_hooks() {
  for (size_t u = 0; u < units_.size(); ++u) {
    for (const auto& accumulator : units_[u]->grad_accumulators()) {
      hook_keys_.push_back(
          accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
              [this, u](const torch::autograd::variable_list& outputs,
                        const torch::autograd::variable_list&) {
                on_grad_ready(u);
                return outputs;
              })));
      hooked_.push_back(accumulator);
    }
  }
}

void MMFullyShardedDataParallel::begin_forward(bool will_backward) {
  if (will_backward) {
    backward_sync_ = sync_enabled_;
    for (auto& unit : units_) unit->expose_unsharded_grads();
  }
  schedule_->begin_forward(will_backward);
}

TensorDict MMFullyShardedDataParallel::forward(const TensorDict& data, ForwardMode mode) {
  const bool will_backward = module().is_training() && at::GradMode::is_enabled();
  if (!will_backward) {
    return without_backward([&] { return module().forward(cast_inputs(data), mode); });
  }
  begin_forward(true);
  TensorDict outputs = module().forward(cast_inputs(data), mode);
  schedule_->end_forward();
  count_unreached(outputs);
  for (auto& [name, tensor] : outputs) {
    if (!tensor.requires_grad()) continue;
    tensor.register_hook([this](const at::Tensor& grad) {
      begin_backward();
      return grad;
    });
  }
  return outputs;
}

template <typename Step>
TensorDict MMFullyShardedDataParallel::without_backward(Step step) {
  begin_forward(false);
  TensorDict outputs;
  try {
    outputs = step();
  } catch (...) {
    schedule_->reshard_all();
    throw;
  }
  schedule_->reshard_all();
  return outputs;
}

TensorDict MMFullyShardedDataParallel::train_step(const TensorDict& data,
                                                  optim::OptimWrapper& optim_wrapper) {
  if (skipped_init_) {
    throw dist::InvalidArgument(dist::on_rank(
        group_->my_global_rank(),
        std::string(kFsdpWrapper) + ": skip_init_weights left " + *skipped_init_ +
            " as zeros; load a checkpoint (the strategy's load_checkpoint or resume) before "
            "training"));
  }
  auto scope = optim_wrapper.optim_context(scheme_.no_sync_inside_accumulation ? this : nullptr);
  joining_ = notify_join(*this, sync_enabled_).has_value();
  shadow_batch_ = joining_ ? data : TensorDict{};
  shadow_optim_ = joining_ ? &optim_wrapper : nullptr;
  return train_once(data, optim_wrapper, /*contributes=*/true);
}

// Every rank has made as many backwards as the others at each iteration of
// a Join, so a shadowing rank's optimizer wrapper decides on no_sync and on
// stepping as theirs do.
void MMFullyShardedDataParallel::shadow_iteration(const JoinRound&) {
  auto scope = shadow_optim_->optim_context(scheme_.no_sync_inside_accumulation ? this : nullptr);
  train_once(shadow_batch_, *shadow_optim_, /*contributes=*/false);
}

void MMFullyShardedDataParallel::finish_join(int last_rank) {
  broadcast_buffers(module(), group_, last_rank);
  joining_ = false;
  shadow_batch_.clear();
  shadow_optim_ = nullptr;
}

TensorDict MMFullyShardedDataParallel::train_once(const TensorDict& data,
                                                  optim::OptimWrapper& optim_wrapper,
                                                  bool contributes) {
  ParsedLosses parsed = parse_losses(forward(preprocess(data, true), ForwardMode::kLoss), group_,
                                     /*across_ranks=*/!joining_);
  optim_wrapper.update_params(contributes ? parsed.loss : parsed.loss * 0);
  return parsed.log_vars;
}

TensorDict MMFullyShardedDataParallel::val_step(const TensorDict& data) {
  return without_backward([&] { return module().val_step(cast_inputs(data)); });
}

TensorDict MMFullyShardedDataParallel::test_step(const TensorDict& data) {
  return without_backward([&] { return module().test_step(cast_inputs(data)); });
}

at::Tensor MMFullyShardedDataParallel::call(const torch::nn::Module& module,
                                            const std::function<at::Tensor()>& body) {
  const auto it = std::find(unit_modules_.begin(), unit_modules_.end(), &module);
  const size_t u = it - unit_modules_.begin();
  schedule_->enter(u);
  at::Tensor output = body();
  if (schedule_->leave(u, output.requires_grad())) {
    // FSDP's pre-backward: the unit is whole again before its backward runs.
    output.register_hook([this, u](const at::Tensor& grad) {
      begin_backward();
      schedule_->pre_backward(u);
      return grad;
    });
  }
  return output;
}

// Units that reduce during backward do so in launch order. A parameter
// this rank's forward did not use would hold its unit, and every unit after
// it, until the end of backward, while a rank that used it launches them
// on the way: the ranks' reductions would interleave differently with the
// other collectives of backward (SyncBatchNorm's). As PyTorch's DDP does
// with find_unused_parameters, such parameters count as ready from the
// start of backward (the unit itself once its backward began, where its
// output awaits one: UnitSchedule).
void MMFullyShardedDataParallel::count_unreached(const TensorDict& outputs) {
  std::fill(unreached_.begin(), unreached_.end(), 0);
  if (!backward_sync_ || !scheme_.reduce_during_backward) return;
  std::vector<at::Tensor> tensors, params;
  std::vector<size_t> unit_of;
  for (const auto& [name, tensor] : outputs) tensors.push_back(tensor);
  for (size_t u = 0; u < units_.size(); ++u) {
    for (const auto& param : units_[u]->parameters()) {
      if (!param.tensor.requires_grad()) continue;
      params.push_back(param.tensor);
      unit_of.push_back(u);
    }
  }
  const std::vector<bool> reached = reached_parameters(tensors, params);
  for (size_t i = 0; i < params.size(); ++i) unreached_[unit_of[i]] += !reached[i];
}

void MMFullyShardedDataParallel::begin_backward() {
  if (schedule_->begin_backward(unreached_, backward_sync_ && scheme_.reduce_during_backward)) {
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize_backward(); });
  }
}

void MMFullyShardedDataParallel::on_grad_ready(size_t unit) {
  begin_backward();
  schedule_->grad_ready(unit);
}

void MMFullyShardedDataParallel::finalize_backward() {
  // Units whose gradients never all came (unused parameters) go now.
  schedule_->finish_backward(backward_sync_);
  if (backward_sync_) {
    const std::vector<std::vector<bool>> used = agree_on_used();
    for (size_t unit : schedule_->launch_order()) {
      if (schedule_->unit(unit).trainable > 0) {
        units_[unit]->finish_reduce_scatter(used[unit]);
      } else {
        units_[unit]->keep_unsharded_grads();
      }
    }
  } else {
    for (auto& unit : units_) unit->keep_unsharded_grads();
  }
  schedule_->reshard_all();
}

// Whether each parameter had a gradient on any rank (one small all-reduce
// per synchronised backward), so that every rank leaves the same ones alone.
std::vector<std::vector<bool>> MMFullyShardedDataParallel::agree_on_used() const {
  std::vector<int> flags;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (schedule_->unit(u).trainable == 0) continue;
    for (bool had : units_[u]->had_grads()) flags.push_back(had ? 1 : 0);
  }
  at::Tensor mask = at::tensor(flags, at::kInt);
  dist::all_reduce_anywhere(mask, "max", group_);
  std::vector<std::vector<bool>> used(units_.size());
  const int* values = mask.data_ptr<int>();
  for (size_t u = 0; u < units_.size(); ++u) {
    if (schedule_->unit(u).trainable == 0) continue;
    for (size_t i = 0; i < units_[u]->parameters().size(); ++i) used[u].push_back(*values++ > 0);
  }
  return used;
}

double MMFullyShardedDataParallel::global_power_sum(const std::vector<at::Tensor>& params,
                                                    double norm_type) {
  const bool infinite = std::isinf(norm_type);
  auto combine = [infinite](double a, double b) { return infinite ? std::max(a, b) : a + b; };
  double sharded = 0, replicated = 0;
  for (const auto& unit : units_) {
    double& total = unit->sharded() ? sharded : replicated;
    total = combine(total, optim::local_power_sum(unit->grads_of(params), norm_type));
  }
  // Shards are disjoint inside a shard group and repeat across replicas:
  // summed over the shard group only. Whole tensors count once.
  if (sharded_norm_group_ && sharded_norm_group_->size() > 1) {
    at::Tensor total = at::scalar_tensor(sharded, at::kDouble);
    dist::all_reduce_anywhere(total, infinite ? "max" : "sum", sharded_norm_group_);
    sharded = total.item<double>();
  }
  return combine(sharded, replicated);
}

bool MMFullyShardedDataParallel::any_non_finite(const std::vector<at::Tensor>& params) {
  bool found = false;
  for (const auto& unit : units_) found = found || optim::local_non_finite(unit->grads_of(params));
  // Replicas hold the same values: the shard group decides for every rank.
  if (sharded_norm_group_ && sharded_norm_group_->size() > 1) {
    at::Tensor flag = at::scalar_tensor(found ? 1 : 0, at::kInt);
    dist::all_reduce_anywhere(flag, "max", sharded_norm_group_);
    found = flag.item<int>() > 0;
  }
  return found;
}

std::map<std::string, at::Tensor> MMFullyShardedDataParallel::full_parameters() {
  std::map<std::string, at::Tensor> values;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> by_tensor;
  for (auto& unit : units_) {
    std::vector<at::Tensor> full = unit->full_values();
    for (size_t i = 0; i < full.size(); ++i) {
      values[unit->parameters()[i].name] = full[i];
      by_tensor[unit->parameters()[i].tensor.unsafeGetTensorImpl()] = full[i];
    }
  }
  for (const auto& item : module().named_parameters()) {
    const auto found = by_tensor.find(item.value().unsafeGetTensorImpl());
    if (found != by_tensor.end()) values.emplace(item.key(), found->second);
  }
  return values;
}

void MMFullyShardedDataParallel::before_step() {
  for (auto& unit : units_) unit->enter_step();
}

void MMFullyShardedDataParallel::after_step() {
  for (auto& unit : units_) unit->leave_step();
}

std::vector<sharding::LocalShard> MMFullyShardedDataParallel::local_shards() {
  std::vector<sharding::LocalShard> out;
  for (const auto& unit : units_) {
    for (auto& shard : unit->local_shards()) out.push_back(std::move(shard));
  }
  return out;
}

void MMFullyShardedDataParallel::load_local_shards(
    const std::vector<sharding::LocalShard>& shards) {
  size_t expected = 0;
  for (const auto& unit : units_) expected += unit->parameters().size();
  if (shards.size() != expected) {
    throw dist::InvalidArgument(dist::on_rank(
        dist::get_rank(), std::string(kFsdpWrapper) + ": load_local_shards got " +
                              std::to_string(shards.size()) + " shards for " +
                              std::to_string(expected) + " parameters; pass local_shards()"));
  }
  auto next = shards.begin();
  for (auto& unit : units_) {
    const auto end = next + unit->parameters().size();
    unit->load_local_shards({next, end});
    next = end;
  }
  skipped_init_.reset();
}

FSDPMemory MMFullyShardedDataParallel::memory() const {
  FSDPMemory memory;
  for (const auto& unit : units_) {
    memory.sharded_parameters += unit->shard_bytes();
    memory.unsharded_gradients += unit->unsharded_grad_bytes();
    for (const auto& param : unit->parameters()) {
      const at::Tensor& grad = param.tensor.grad();
      if (grad.defined()) memory.sharded_gradients += grad.numel() * grad.element_size();
    }
  }
  memory.gathered_now = unit_memory_.meter.current;
  memory.gathered_peak = unit_memory_.meter.peak;
  memory.kept_for_reuse = unit_memory_.pool.stats().kept;
  return memory;
}

}  // namespace engine::model
