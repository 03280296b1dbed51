#include "engine/model/wrappers/reducer.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <sstream>
#include <unordered_set>

#include "engine/dist/collectives.h"
#include "engine/dist/errors.h"
#include "engine/dist/helpers.h"
#include "engine/dist/node_shared.h"
#include "engine/dist/objects.h"
#include "engine/model/wrappers/bucket_plan.h"
#include "engine/model/wrappers/parameter_sync.h"

namespace engine::model {
namespace {

using torch::autograd::Node;
using torch::autograd::variable_list;

// Whether `grad` already is the gradient's slot in its bucket.
bool aliases(const at::Tensor& grad, const at::Tensor& slot) {
  return grad.defined() && grad.data_ptr() == slot.data_ptr() && grad.sizes() == slot.sizes();
}

void check_parameters(const std::vector<NamedParameter>& params, int rank) {
  for (const auto& param : params) {
    if (!param.tensor.requires_grad() || param.tensor.is_sparse()) {
      throw dist::InvalidArgument(dist::on_rank(
          rank, "parameter \"" + param.name +
                    "\" cannot be reduced: the reducer takes dense parameters that require grad"));
    }
  }
}

}  // namespace

std::vector<bool> reached_parameters(const std::vector<at::Tensor>& outputs,
                                     const std::vector<at::Tensor>& params) {
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  auto visit = [&](Node* node) {
    if (node != nullptr && seen.insert(node).second) stack.push_back(node);
  };
  for (const auto& output : outputs) {
    if (!output.defined() || !output.requires_grad()) continue;
    visit(output.grad_fn() ? output.grad_fn().get()
                           : torch::autograd::impl::try_get_grad_accumulator(output).get());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) visit(edge.function.get());
  }
  std::vector<bool> reached(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::try_get_grad_accumulator(params[i]);
    reached[i] = accumulator && seen.count(accumulator.get()) > 0;
  }
  return reached;
}

Reducer::Reducer(std::vector<NamedParameter> params, dist::GroupPtr group, ReducerOptions options)
    : params_(std::move(params)),
      group_(std::move(group)),
      options_(std::move(options)),
      awaiting_first_rebuild_(!options_.find_unused_parameters || options_.static_graph),
      ready_(params_.size()),
      locally_used_(params_.size()),
      world_size_divisor_(at::scalar_tensor(group_->size(), at::kDouble)) {
  check_parameters(params_, group_->my_global_rank());
  build_buckets(reverse_order(params_.size()));
  for (const auto& bucket : buckets_) stats_.bucket_bytes.push_back(bucket.flat.nbytes());
  register_hooks();
}

Reducer::~Reducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  std::vector<BucketInput> inputs;
  for (const auto& param : params_) {
    inputs.push_back({static_cast<int64_t>(param.tensor.numel() * param.tensor.element_size()),
                      dtype_device_key(param.tensor)});
  }
  std::vector<Bucket> buckets;
  location_.assign(params_.size(), {0, 0});
  for (auto& members :
       plan_buckets(inputs, order, options_.first_bucket_cap_bytes, options_.bucket_cap_bytes)) {
    Bucket bucket;
    int64_t numel = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      location_[members[i]] = {buckets.size(), i};
      bucket.offsets.push_back(numel);
      numel += params_[members[i]].tensor.numel();
    }
    bucket.flat = zeros_for_bucket(numel, params_[members.front()].tensor);
    bucket.params = std::move(members);
    buckets.push_back(std::move(bucket));
  }
  // Gradients that already alias the old buckets move into the new ones.
  std::vector<at::Tensor> grads;
  for (const auto& param : params_) grads.push_back(param.tensor.grad());
  buckets_ = std::move(buckets);
  if (!options_.gradient_as_bucket_view) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (grads[i].defined()) {
      slot(i).copy_(grads[i]);
      point_grad_at_slot(i);
    }
  }
}

// CPU buckets live where every rank of a one-machine group maps them, so
// their all_reduce is a pass over shared memory (engine/dist/node_shared.h).
at::Tensor Reducer::zeros_for_bucket(int64_t numel, const at::Tensor& like) const {
  if (like.device().is_cpu()) return dist::zeros_node_shared(numel, like.scalar_type(), group_);
  return at::zeros({numel}, like.options().requires_grad(false));
}

void Reducer::register_hooks() {
  for (size_t i = 0; i < params_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[i].tensor);
    hook_keys_.push_back(
        accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, i](const variable_list& outputs, const variable_list&) {
              on_grad_ready(i);
              return outputs;
            })));
    accumulators_.push_back(std::move(accumulator));
  }
}

at::Tensor Reducer::slot(size_t param) const {
  const auto [bucket, index] = location_[param];
  const at::Tensor& tensor = params_[param].tensor;
  return buckets_[bucket]
      .flat.narrow(0, buckets_[bucket].offsets[index], tensor.numel())
      .view(tensor.sizes());
}

void Reducer::point_grad_at_slot(size_t param) {
  params_[param].tensor.mutable_grad() = slot(param);
}

void Reducer::prepare_for_backward(const std::vector<at::Tensor>& outputs) {
  // The backward begins at the outputs, in the outermost graph task: its end
  // is the backward's end even when gradients arrive in reentrant backwards
  // nested inside it, whose own ends come first.
  for (const auto& output : outputs) {
    if (!output.defined() || !output.requires_grad()) continue;
    at::Tensor(output).register_hook([this](const at::Tensor& grad) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (sync_enabled_ && !in_backward_) begin_backward();
      return grad;
    });
  }
  std::lock_guard<std::mutex> lock(mutex_);
  backward_start_ = Clock::now();
  if (!options_.find_unused_parameters || options_.static_graph) return;
  std::vector<at::Tensor> tensors;
  for (const auto& param : params_) tensors.push_back(param.tensor);
  std::vector<bool> reached = reached_parameters(outputs, tensors);
  unreached_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) unreached_[i] = !reached[i];
}

bool Reducer::grad_sync_enabled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sync_enabled_;
}

void Reducer::set_grad_sync_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(mutex_);
  sync_enabled_ = enabled;
}

ReducerStats Reducer::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::vector<std::vector<size_t>> Reducer::buckets() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::vector<size_t>> result;
  for (const auto& bucket : buckets_) result.push_back(bucket.params);
  return result;
}

void Reducer::on_grad_ready(size_t param) {
  std::lock_guard<std::mutex> lock(mutex_);
  locally_used_[param] = true;
  if (!sync_enabled_) return;
  if (!in_backward_) begin_backward();
  if (options_.static_graph) return on_static_grad_ready(param);
  mark_ready(param);
  launch_complete_buckets();
}

void Reducer::on_static_grad_ready(size_t param) {
  if (++arrivals_[param] == 1) first_arrival_order_.push_back(param);
  if (static_arrivals_.empty()) return;  // the first backward reduces at its end
  if (arrivals_[param] > static_arrivals_[param]) {
    refuse_changed_graph("parameter \"" + params_[param].name + "\" received " +
                         std::to_string(arrivals_[param]) + " gradients, the first backward " +
                         std::to_string(static_arrivals_[param]));
  }
  if (arrivals_[param] < static_arrivals_[param]) return;
  mark_ready(param);
  launch_complete_buckets();
}

void Reducer::refuse_changed_graph(const std::string& what) const {
  throw dist::InvalidArgument(dist::on_rank(
      group_->my_global_rank(),
      "static_graph: " + what +
          "; a static graph reaches the same parameters as often in every synchronised "
          "backward (construct the wrapper without static_graph, and with "
          "find_unused_parameters if the used parameters change)"));
}

void Reducer::begin_backward() {
  in_backward_ = true;
  backward_seen_ = true;
  if (!backward_start_) backward_start_ = Clock::now();
  comm_start_.reset();
  compute_end_.reset();
  hook_results_.clear();
  ready_.assign(params_.size(), false);
  arrival_order_.clear();
  works_.clear();
  next_bucket_ = 0;
  for (auto& bucket : buckets_) bucket.pending = bucket.params.size();
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize_backward(); });
  arrivals_.assign(params_.size(), 0);
  first_arrival_order_.clear();
  std::vector<bool> unreached = std::move(unreached_);
  unreached_.clear();
  if (options_.static_graph && !static_arrivals_.empty()) {
    unreached.assign(params_.size(), false);
    for (size_t i = 0; i < params_.size(); ++i) unreached[i] = static_arrivals_[i] == 0;
  }
  for (size_t i = 0; i < unreached.size(); ++i) {
    if (unreached[i]) mark_ready(i);
  }
}

void Reducer::mark_ready(size_t param) {
  if (ready_[param]) {
    throw dist::InvalidArgument(dist::on_rank(
        group_->my_global_rank(),
        "parameter \"" + params_[param].name +
            "\" received its gradient twice in one synchronised backward (a second backward "
            "through the same forward, or reentrant checkpointing); run such backwards inside "
            "no_sync() except the last, or construct the wrapper with static_graph"));
  }
  ready_[param] = true;
  arrival_order_.push_back(param);
  fill_slot(param);
  --buckets_[location_[param].first].pending;
}

// Gradients are averaged by dividing before the sum, as PyTorch's reducer
// does, in the same pass that brings them into the bucket.
void Reducer::fill_slot(size_t param) {
  const at::Tensor& grad = params_[param].tensor.grad();
  at::Tensor target = slot(param);
  // A hook takes the gradients undivided, as PyTorch's does.
  const bool divide = options_.comm_hook == nullptr;
  if (!grad.defined()) {
    target.zero_();
  } else if (aliases(grad, target)) {
    if (divide) target.div_(group_->size());
  } else {
    if (divide) {
      at::div_out(target, grad, world_size_divisor_);
    } else {
      target.copy_(grad);
    }
    if (options_.gradient_as_bucket_view) point_grad_at_slot(param);
  }
}

void Reducer::launch_complete_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_];
    if (options_.on_bucket_launch) options_.on_bucket_launch(next_bucket_, bucket.params);
    if (next_bucket_ == 0) comm_start_ = Clock::now();
    works_.push_back(launch(bucket, next_bucket_));
    ++next_bucket_;
  }
  if (next_bucket_ == buckets_.size() && !compute_end_) compute_end_ = Clock::now();
}

dist::WorkPtr Reducer::launch(Bucket& bucket, size_t index) {
  if (!options_.comm_hook) return dist::all_reduce_async(bucket.flat, "sum", group_);
  GradBucket view;
  view.index = index;
  view.is_last = index + 1 == buckets_.size();
  view.buffer = bucket.flat;
  for (size_t param : bucket.params) {
    view.gradients.push_back(slot(param));
    view.parameters.push_back(params_[param].tensor);
  }
  view.parameter_indices = bucket.params;
  HookWork work = options_.comm_hook->run(view, group_);
  if (!work.work || !work.result.defined() || work.result.numel() != bucket.flat.numel()) {
    throw dist::InvalidArgument(dist::on_rank(
        group_->my_global_rank(), "the communication hook " + options_.comm_hook->describe() +
                                      " returned no Work, or a result whose size is not its "
                                      "bucket's (" +
                                      std::to_string(bucket.flat.numel()) + " elements)"));
  }
  hook_results_.push_back(work.result);
  return work.work;
}

void Reducer::register_comm_hook(CommHookPtr hook) {
  const int rank = group_->my_global_rank();
  if (!hook) throw dist::InvalidArgument(dist::on_rank(rank, "register_comm_hook: no hook given"));
  std::lock_guard<std::mutex> lock(mutex_);
  const auto described = dist::all_gather_object(hook->describe(), group_);
  for (size_t i = 0; i < described.size(); ++i) {
    if (described[i].toStringRef() != described[0].toStringRef()) {
      throw dist::InvalidArgument(
          dist::on_rank(rank, "register_comm_hook: the group's ranks register different hooks: " +
                                  described[0].toStringRef() + " on its first rank, " +
                                  described[i].toStringRef() + " on its rank " + std::to_string(i) +
                                  "; register the same hook on every rank"));
    }
  }
  if (options_.comm_hook) {
    throw dist::InvalidArgument(
        dist::on_rank(rank, "register_comm_hook: a hook (" + options_.comm_hook->describe() +
                                ") is registered already; a reducer takes one, once"));
  }
  if (backward_seen_) {
    throw dist::InvalidArgument(dist::on_rank(
        rank, "register_comm_hook: register the hook before the first synchronised backward"));
  }
  options_.comm_hook = std::move(hook);
}

void Reducer::finalize_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  in_backward_ = false;
  if (options_.static_graph && static_arrivals_.empty()) finish_first_static_backward();
  if (next_bucket_ < buckets_.size()) handle_never_ready();
  for (size_t i = 0; i < works_.size(); ++i) {
    works_[i]->wait();
    if (!options_.comm_hook) continue;
    at::Tensor& flat = buckets_[i].flat;
    const at::Tensor& result = hook_results_[i];
    if (!result.is_same(flat)) flat.copy_(result.reshape({-1}));
  }
  works_.clear();
  hook_results_.clear();
  write_back(globally_used(locally_used_));
  record_backward(locally_used_);
  locally_used_.assign(params_.size(), false);
  if (awaiting_first_rebuild_) {
    awaiting_first_rebuild_ = false;
    rebuild_from_arrival_order();
  }
}

// Every gradient of the first static backward has arrived: into the
// buckets in the order they first came, the parameters that got none too,
// and every bucket launched.
void Reducer::finish_first_static_backward() {
  for (size_t param : first_arrival_order_) mark_ready(param);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (arrivals_[i] == 0) mark_ready(i);
  }
  launch_complete_buckets();
  static_arrivals_ = arrivals_;
}

void Reducer::handle_never_ready() {
  std::vector<size_t> missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) missing.push_back(i);
  }
  if (options_.static_graph) {
    const size_t i = missing.front();
    for (auto& work : works_) work->wait();
    works_.clear();
    refuse_changed_graph("parameter \"" + params_[i].name + "\" received " +
                         std::to_string(arrivals_[i]) + " gradients, the first backward " +
                         std::to_string(static_arrivals_[i]));
  }
  if (options_.find_unused_parameters) {
    for (size_t i : missing) mark_ready(i);
    launch_complete_buckets();
    return;
  }
  for (auto& work : works_) work->wait();
  works_.clear();
  std::ostringstream names;
  for (size_t i = 0; i < missing.size(); ++i) {
    names << (i ? ", " : "") << missing[i] << " \"" << params_[missing[i]].name << "\"";
  }
  throw dist::InvalidArgument(dist::on_rank(
      group_->my_global_rank(),
      "Expected to have finished reduction in this backward, but these parameters received no "
      "gradient: " +
          names.str() +
          ". Either make the loss depend on every parameter, set requires_grad=false on the "
          "ones you do not train, or construct the wrapper with find_unused_parameters=true"));
}

// Which parameters some rank used in this backward: agreed (collective) with
// find_unused_parameters, and under static_graph in the first backward only.
std::vector<bool> Reducer::globally_used(const std::vector<bool>& locally_used) {
  if (!static_globally_used_.empty()) return static_globally_used_;
  if (!options_.find_unused_parameters && !options_.static_graph) {
    return std::vector<bool>(params_.size(), true);
  }
  std::vector<bool> used = agree_on_used(locally_used);
  if (options_.static_graph) static_globally_used_ = used;
  return used;
}

void Reducer::shadow_backward(bool own_gradients) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.comm_hook) {
    throw dist::InvalidArgument(
        dist::on_rank(group_->my_global_rank(), "shadow_backward: not with a communication hook"));
  }
  std::vector<dist::WorkPtr> works;
  for (auto& bucket : buckets_) {
    if (own_gradients) {
      for (size_t param : bucket.params) fill_slot(param);
    } else {
      bucket.flat.zero_();
    }
    works.push_back(dist::all_reduce_async(bucket.flat, "sum", group_));
  }
  for (auto& work : works) work->wait();
  const std::vector<bool> used = globally_used(std::vector<bool>(params_.size(), false));
  if (own_gradients) write_back(used);
  if (awaiting_first_rebuild_) {
    // Joins the broadcast of the first backward's order; this rank's own
    // order (the buckets') is used only when it is the group's first rank.
    awaiting_first_rebuild_ = false;
    arrival_order_.clear();
    for (const auto& bucket : buckets_) {
      arrival_order_.insert(arrival_order_.end(), bucket.params.begin(), bucket.params.end());
    }
    rebuild_from_arrival_order();
  }
}

std::vector<bool> Reducer::agree_on_used(const std::vector<bool>& locally_used) {
  at::Tensor used = at::zeros({static_cast<int64_t>(params_.size())}, at::kInt);
  for (size_t i = 0; i < params_.size(); ++i) used[i] = locally_used[i] ? 1 : 0;
  dist::all_reduce_anywhere(used, "sum", group_);
  std::vector<bool> globally_used(params_.size());
  auto values = used.accessor<int, 1>();
  for (size_t i = 0; i < params_.size(); ++i) globally_used[i] = values[i] > 0;
  return globally_used;
}

void Reducer::write_back(const std::vector<bool>& globally_used) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!globally_used[i]) continue;
    at::Tensor& grad = params_[i].tensor.mutable_grad();
    at::Tensor reduced = slot(i);
    if (options_.gradient_as_bucket_view) {
      if (!aliases(grad, reduced)) grad = reduced;
    } else if (grad.defined()) {
      grad.copy_(reduced);
    } else {
      grad = reduced.clone();
    }
  }
}

void Reducer::record_backward(const std::vector<bool>& locally_used) {
  const auto comm_end = Clock::now();
  auto ns = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  };
  ++stats_.iterations;
  stats_.ready_order = arrival_order_;
  stats_.unused.clear();
  for (size_t i = 0; i < locally_used.size(); ++i) {
    if (!locally_used[i]) stats_.unused.push_back(i);
  }
  if (backward_start_ && compute_end_)
    stats_.backward_compute_ns += ns(*compute_end_ - *backward_start_);
  if (comm_start_) stats_.backward_comm_ns += ns(comm_end - *comm_start_);
  if (comm_start_ && compute_end_) stats_.overlap_ns += ns(*compute_end_ - *comm_start_);
  backward_start_.reset();
}

void Reducer::rebuild_from_arrival_order() {
  if (arrival_order_.size() != params_.size()) return;
  at::Tensor order = at::empty({static_cast<int64_t>(params_.size())}, at::kLong);
  for (size_t i = 0; i < arrival_order_.size(); ++i)
    order[i] = static_cast<int64_t>(arrival_order_[i]);
  dist::broadcast_anywhere(order, group_->global_rank_of(0), group_);
  std::vector<size_t> agreed(params_.size());
  auto values = order.accessor<int64_t, 1>();
  for (size_t i = 0; i < agreed.size(); ++i) agreed[i] = static_cast<size_t>(values[i]);
  build_buckets(agreed);
  rebuilt_order_ = std::move(agreed);
  record_rebuilt_sizes();
}

void Reducer::record_rebuilt_sizes() {
  stats_.rebuilt_bucket_bytes.clear();
  for (const auto& bucket : buckets_) stats_.rebuilt_bucket_bytes.push_back(bucket.flat.nbytes());
}

std::vector<size_t> Reducer::rebuilt_order() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rebuilt_order_;
}

void Reducer::restore_rebuilt_order(const std::vector<size_t>& order) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<bool> seen(params_.size());
  for (size_t param : order) {
    if (param >= params_.size() || seen[param]) {
      throw dist::InvalidArgument(
          dist::on_rank(group_->my_global_rank(),
                        "restore_rebuilt_order: the order is not a permutation of the reducer's " +
                            std::to_string(params_.size()) + " parameters (it names " +
                            std::to_string(param) + (param < params_.size() ? " twice)" : ")")));
    }
    seen[param] = true;
  }
  if (order.size() != params_.size()) {
    throw dist::InvalidArgument(
        dist::on_rank(group_->my_global_rank(),
                      "restore_rebuilt_order: the order names " + std::to_string(order.size()) +
                          " parameters, the reducer has " + std::to_string(params_.size())));
  }
  build_buckets(order);
  rebuilt_order_ = order;
  record_rebuilt_sizes();
  awaiting_first_rebuild_ = false;
}

}  // namespace engine::model
