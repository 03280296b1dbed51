#include "testing/model/sharding_cases.h"

#include <torch/nn/module.h>
#include <torch/optim/adam.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include "engine/dist/info.h"
#include "engine/model/batch_norm.h"
#include "engine/model/init/deferred.h"
#include "engine/model/named_parameter.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/model/wrappers/zero_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
#include "testing/cases.h"
#include "testing/pairwise.h"

namespace sharding_cases {

using engine::model::MMFullyShardedDataParallel;

void showValue(const ShardingCase& c, std::ostream& os) {
  os << "world_size=" << c.world_size << " strategy=" << c.strategy
     << " hybrid_shard_size=" << c.hybrid_shard_size
     << " members=" << ddp_cases::describe(c.members) << " param_dtype=" << c.param_dtype
     << " reduce_dtype=" << c.reduce_dtype << " buffer_dtype=" << c.buffer_dtype
     << " backward_prefetch=" << c.backward_prefetch << " forward_prefetch=" << c.forward_prefetch
     << " limit_all_gathers=" << c.limit_all_gathers << " cpu_offload=" << c.cpu_offload
     << " deferred=" << c.deferred << " reduce_bucket_size=" << c.reduce_bucket_size
     << " overlap_comm=" << c.overlap_comm << " wrap=" << c.wrap
     << " min_num_params=" << c.min_num_params << " batch=" << c.batch
     << " iterations=" << c.iterations << " accumulative_counts=" << c.accumulative_counts
     << " communicate_every_step=" << c.communicate_every_step << " ignored=" << c.ignored
     << " freeze_first_bias=" << c.freeze_first_bias << " adam=" << c.adam
     << " clip_grad=" << ddp_cases::describe(c.clip_grad) << " seed=" << c.seed
     << " net: " << nets::describe(c.spec);
}

namespace {

// The grid's options and their values, groups of up to `largest_group`.
// Random cases draw each as the grid would name it, so both explore the
// same space.
std::vector<pairwise::Factor> grid_factors(int largest_group) {
  std::vector<pairwise::Factor> factors = {
      {"strategy",
       {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "ZERO_1", "ZERO_2"}}};
  for (auto& factor : cases::placement_factors(largest_group)) factors.push_back(factor);
  factors.insert(factors.end(),
                 {{"clip_grad", {"none", "norm", "value"}},
                  {"precision", {"float64", "param_float32", "reduce_float32", "reduce_float64"}},
                  {"accumulation", {"1", "2-3"}},
                  {"wrap", {"root", "layers", "size"}},
                  {"optimizer", {"sgd", "adam"}},
                  {"cpu_offload", {"off", "on"}}});
  return factors;
}

bool is_zero(const std::string& strategy) { return strategy.rfind("ZERO", 0) == 0; }

// Whether a combination can run: the placement must fit, and ranks outside
// the group need a strategy other than HYBRID_SHARD (which needs the
// default group); ZeRO has no mixed precision nor offload; Adam only where
// nothing rounds to float32 (see the comment on `adam` below).
bool runnable(const pairwise::Values& values, int max_world_size) {
  const std::string& precision = values.at("precision");
  if (!cases::placement_fits(values, max_world_size) ||
      (values.at("ranks_outside") == "some" && values.at("strategy") == "HYBRID_SHARD")) {
    return false;
  }
  if (is_zero(values.at("strategy")) &&
      (precision != "float64" || values.at("cpu_offload") == "on")) {
    return false;
  }
  return values.at("optimizer") == "sgd" || precision == "float64" || precision == "reduce_float64";
}

rc::Gen<ShardingCase> case_with(int max_world_size, std::optional<pairwise::Values> fixed) {
  return rc::gen::exec([max_world_size, fixed] {
    const auto values =
        fixed ? *fixed : pairwise::draw(grid_factors(max_world_size), [&](const auto& v) {
          return runnable(v, max_world_size);
        });
    ShardingCase c;
    c.spec = *nets::net_spec();
    c.strategy = values.at("strategy");
    auto placed = *cases::placement(values, max_world_size);
    c.world_size = placed.world_size;
    c.members = std::move(placed.members);
    if (c.strategy == "HYBRID_SHARD") {
      c.hybrid_shard_size = c.world_size % 2 == 0 ? c.world_size / 2 : c.world_size;
    }
    const std::string& precision = values.at("precision");
    if (!is_zero(c.strategy)) {
      c.param_dtype = precision == "param_float32" ? "float32" : "";
      c.reduce_dtype = precision == "reduce_float32"   ? "float32"
                       : precision == "reduce_float64" ? "float64"
                       : precision == "param_float32"
                           ? *rc::gen::element<std::string>("", "float32", "float64")
                           : "";
      c.buffer_dtype = *rc::gen::element<std::string>("", "float32");
      c.backward_prefetch = *rc::gen::element<std::string>("BACKWARD_PRE", "BACKWARD_POST", "NONE");
      c.forward_prefetch = *rc::gen::arbitrary<bool>();
      c.limit_all_gathers = *rc::gen::arbitrary<bool>();
      c.cpu_offload = values.at("cpu_offload") == "on";
      c.deferred = *rc::gen::arbitrary<bool>();
    }
    c.wrap = values.at("wrap");
    c.accumulative_counts = values.at("accumulation") == "1" ? 1 : *rc::gen::inRange<int64_t>(2, 4);
    c.clip_grad = *ddp_cases::clip_grad(values.at("clip_grad"));
    c.reduce_bucket_size = *rc::gen::inRange<int64_t>(1, 200);
    c.overlap_comm = *rc::gen::arbitrary<bool>();
    c.min_num_params = *rc::gen::inRange<int64_t>(1, 60);
    c.batch = *rc::gen::inRange<int64_t>(c.spec.batch_norm ? 2 : 1, 4);
    c.communicate_every_step = *rc::gen::arbitrary<bool>();
    c.iterations = *rc::gen::inRange<int>(c.accumulative_counts, 2 * c.accumulative_counts + 2);
    // Ignored modules are not cast: a head or body left in float64 cannot
    // exchange activations with the others in float32 (as in PyTorch).
    if (c.param_dtype.empty()) {
      c.ignored = c.spec.nested ? *rc::gen::element<std::string>("", "head0", "body")
                                : *rc::gen::element<std::string>("", "head0");
    }
    c.freeze_first_bias = *rc::gen::arbitrary<bool>();
    // Adam turns a gradient's rounding into a step of up to lr where the
    // gradient is as small as its rounding (as before a BatchNorm): under
    // float32 rounding it is left out; it sees the shards and gradients in
    // their own dtype either way.
    c.adam = values.at("optimizer") == "adam";
    c.seed = *rc::gen::arbitrary<uint32_t>();
    const bool rank_dependent = is_zero(c.strategy) || c.wrap == "root";
    for (int it = 0; it < c.iterations; ++it) {
      std::vector<std::vector<bool>> used;
      for (size_t seat = 0; seat < c.members.size(); ++seat) {
        if (seat > 0 && !rank_dependent) {
          used.push_back(used.front());
          continue;
        }
        std::vector<bool> heads(c.spec.heads);
        for (auto&& head : heads) head = *rc::gen::arbitrary<bool>();
        heads[*rc::gen::inRange<int64_t>(0, c.spec.heads)] = true;  // the loss needs one
        used.push_back(heads);
      }
      c.used_heads.push_back(used);
      auto orders = ddp_cases::head_orders(static_cast<int>(c.members.size()), c.spec.heads);
      if (!rank_dependent) orders.assign(orders.size(), orders.front());
      c.head_order.push_back(orders);
    }
    return c;
  });
}

}  // namespace

rc::Gen<ShardingCase> sharding_case(int max_world_size) {
  return case_with(max_world_size, std::nullopt);
}

pairwise::Grid sharding_grid(int max_world_size) {
  return pairwise::covering_grid(
      grid_factors(std::min(max_world_size, 4)),
      [&](const pairwise::Values& values) { return runnable(values, max_world_size); },
      {{"strategy", "group_size", "clip_grad"}});
}

rc::Gen<ShardingCase> sharding_case(const pairwise::Grid& grid, const pairwise::Row& row,
                                    int max_world_size) {
  return case_with(max_world_size, pairwise::named(grid.factors, row));
}

namespace {

std::shared_ptr<torch::optim::Optimizer> optimizer_for(const ShardingCase& c,
                                                       torch::nn::Module& module) {
  if (c.adam) {
    return std::make_shared<torch::optim::Adam>(engine::model::unique_parameters(module),
                                                torch::optim::AdamOptions(0.01));
  }
  return std::make_shared<torch::optim::SGD>(engine::model::unique_parameters(module),
                                             torch::optim::SGDOptions(0.1).momentum(0.5));
}

engine::optim::OptimWrapperOptions wrapper_options(const ShardingCase& c) {
  engine::optim::OptimWrapperOptions options;
  options.accumulative_counts = c.accumulative_counts;
  options.clip_grad = c.clip_grad;
  return options;
}

std::shared_ptr<nets::TestNet> prepared_net(const ShardingCase& c) {
  auto net = nets::make_net(c.spec);
  if (c.freeze_first_bias) {
    const std::string first = c.spec.image > 0 ? "conv" : c.spec.nested ? "body.trunk0" : "trunk0";
    net->named_parameters()[first + ".bias"].set_requires_grad(false);
  }
  return net;
}

engine::model::TensorDict batch_of(const ShardingCase& c, int iteration, int seat) {
  return nets::make_batch(c.spec, c.batch, c.seed * 1000 + iteration * 10 + seat,
                          c.used_heads[iteration][seat], c.head_order[iteration][seat]);
}

std::map<std::string, at::Tensor> float64_buffers(torch::nn::Module& module) {
  auto buffers = nets::buffers_of(module);
  for (auto& [name, value] : buffers) {
    if (at::isFloatingType(value.scalar_type())) value = value.to(at::kDouble);
  }
  return buffers;
}

double grad_norm_of(const engine::optim::OptimWrapper& optim) {
  return optim.last_grad_norm().value_or(std::numeric_limits<double>::quiet_NaN());
}

// Defers `net` and returns a param_init_fn that gives each module back the
// parameters and buffers it held before (the deferred tensors stay the same
// objects, so their TensorImpls key the values).
std::function<void(torch::nn::Module&)> built_values(torch::nn::Module& net) {
  auto values = std::make_shared<std::unordered_map<const c10::TensorImpl*, at::Tensor>>();
  for (const auto& tensor : net.parameters())
    (*values)[tensor.unsafeGetTensorImpl()] = tensor.detach().clone();
  for (const auto& tensor : net.buffers())
    (*values)[tensor.unsafeGetTensorImpl()] = tensor.detach().clone();
  engine::model::init::defer(net);
  return [values](torch::nn::Module& module) {
    torch::NoGradGuard no_grad;
    for (auto& tensor : module.parameters(/*recurse=*/false)) {
      tensor.copy_(values->at(tensor.unsafeGetTensorImpl()));
    }
    for (auto& tensor : module.buffers(/*recurse=*/false)) {
      tensor.copy_(values->at(tensor.unsafeGetTensorImpl()));
    }
  };
}

engine::model::FSDPOptions fsdp_options(const ShardingCase& c, nets::TestNet& net,
                                        const engine::dist::GroupPtr& group) {
  engine::model::FSDPOptions options;
  options.process_group = group;
  options.sharding_strategy = engine::model::parse_sharding_strategy(c.strategy);
  options.hybrid_shard_size = c.hybrid_shard_size;
  options.sync_module_states = true;
  if (c.wrap == "layers") options.auto_wrap_policy.module_types = {"Linear", "Conv2d"};
  if (c.wrap == "size") options.auto_wrap_policy.min_num_params = c.min_num_params;
  if (!c.ignored.empty()) options.ignored_modules = {net.named_children()[c.ignored].get()};
  auto dtype = [](const std::string& name) -> std::optional<at::ScalarType> {
    if (name.empty()) return std::nullopt;
    return name == "float32" ? at::kFloat : at::kDouble;
  };
  options.mixed_precision = {dtype(c.param_dtype), dtype(c.reduce_dtype), dtype(c.buffer_dtype)};
  options.backward_prefetch = engine::model::parse_backward_prefetch(c.backward_prefetch);
  options.forward_prefetch = c.forward_prefetch;
  options.limit_all_gathers = c.limit_all_gathers;
  options.device_id = engine::dist::get_comm_device(group);
  options.cpu_offload = c.cpu_offload;
  if (c.deferred) options.param_init_fn = built_values(net);
  return options;
}

std::shared_ptr<MMFullyShardedDataParallel> wrap(const ShardingCase& c,
                                                 std::shared_ptr<nets::TestNet> net,
                                                 const engine::dist::GroupPtr& group) {
  if (c.strategy == "ZERO_1" || c.strategy == "ZERO_2") {
    engine::model::ZeroOptions options;
    options.stage = c.strategy == "ZERO_1" ? 1 : 2;
    options.reduce_bucket_size = c.reduce_bucket_size;
    options.overlap_comm = c.overlap_comm;
    options.process_group = group;
    net->to(engine::dist::get_comm_device(group));  // ZeRO trains the module where it is
    return std::make_shared<engine::model::MMZeroDataParallel>(net, options);
  }
  return std::make_shared<MMFullyShardedDataParallel>(net, fsdp_options(c, *net, group));
}

}  // namespace

Run train_rank(const ShardingCase& c, const nets::TestNet& initial, int rank) {
  const engine::dist::GroupPtr group = cases::group_of(c.world_size, c.members);
  const int seat = cases::seat_of(c.members, rank);
  if (seat < 0) return {};
  auto net = prepared_net(c);
  ddp_cases::set_starting_state(*net, initial, seat, c.seed, rank);
  if (c.spec.batch_norm) engine::model::convert_sync_batchnorm(*net, group);
  auto fsdp = wrap(c, net, group);
  engine::optim::OptimWrapper optim(optimizer_for(c, *fsdp), wrapper_options(c));
  Run run;
  for (int it = 0; it < c.iterations; ++it) {
    const auto batch = batch_of(c, it, seat);
    if (c.communicate_every_step) {
      auto parsed = engine::model::parse_losses(
          fsdp->forward(fsdp->preprocess(batch, true), engine::model::ForwardMode::kLoss), group);
      optim.update_params(parsed.loss);
    } else {
      fsdp->train_step(batch, optim);
    }
    run.parameters.push_back(ddp_cases::on_cpu(fsdp->full_parameters()));
    run.buffers.push_back(ddp_cases::on_cpu(float64_buffers(fsdp->module())));
    run.grad_norms.push_back(grad_norm_of(optim));
  }
  return run;
}

namespace {

// One step of the serial run under a float32 param_dtype: the gradients of
// a float32 copy of `net` reach `net` through a surrogate loss whose
// gradient they are, so that the optim wrapper scales, accumulates, clips
// and steps them as it does a plain loss.
void mixed_precision_step(nets::TestNet& net, nets::TestNet& compute,
                          const engine::model::TensorDict& batch,
                          engine::optim::OptimWrapper& optim) {
  nets::copy_state(net, compute);
  compute.zero_grad();
  engine::model::TensorDict cast;
  for (const auto& [key, value] : batch) cast[key] = value.to(at::kFloat);
  engine::model::parse_losses(compute.forward(cast, engine::model::ForwardMode::kLoss))
      .loss.backward();
  {
    torch::NoGradGuard no_grad;  // the running statistics the forward updated
    auto buffers = net.named_buffers();
    for (const auto& item : compute.named_buffers()) buffers[item.key()].copy_(item.value());
  }
  auto params = net.named_parameters();
  at::Tensor surrogate = at::zeros({}, at::kDouble);
  for (const auto& item : engine::model::unique_named_parameters(compute)) {
    const at::Tensor& grad = item.tensor.grad();
    if (grad.defined()) surrogate = surrogate + (params[item.name] * grad.to(at::kDouble)).sum();
  }
  optim.update_params(surrogate);
}

}  // namespace

Run train_serial(const ShardingCase& c, nets::TestNet& initial) {
  auto net = prepared_net(c);
  nets::copy_state(initial, *net);
  auto compute = prepared_net(c);
  compute->to(at::kFloat);
  engine::optim::OptimWrapper optim(optimizer_for(c, *net), wrapper_options(c));
  Run run;
  for (int it = 0; it < c.iterations; ++it) {
    std::vector<engine::model::TensorDict> batches;
    for (size_t seat = 0; seat < c.members.size(); ++seat) {
      batches.push_back(batch_of(c, it, static_cast<int>(seat)));
    }
    if (c.param_dtype.empty()) {
      net->train_step(nets::concatenate(batches), optim);
    } else {
      mixed_precision_step(*net, *compute, nets::concatenate(batches), optim);
    }
    run.parameters.push_back(nets::snapshot(*net));
    run.buffers.push_back(float64_buffers(*net));
    run.grad_norms.push_back(grad_norm_of(optim));
  }
  return run;
}

namespace {

c10::IValue to_ivalue(const ddp_cases::Snapshots& snapshots) {
  c10::impl::GenericList steps(c10::AnyType::get());
  for (const auto& snapshot : snapshots) {
    c10::Dict<std::string, at::Tensor> dict;
    for (const auto& [name, value] : snapshot) dict.insert(name, value);
    steps.push_back(dict);
  }
  return steps;
}

ddp_cases::Snapshots snapshots_from(const c10::IValue& value) {
  ddp_cases::Snapshots snapshots;
  for (const auto& step : value.toListRef()) {
    std::map<std::string, at::Tensor> snapshot;
    for (const auto& item : step.toGenericDict()) {
      snapshot[item.key().toStringRef()] = item.value().toTensor();
    }
    snapshots.push_back(std::move(snapshot));
  }
  return snapshots;
}

}  // namespace

c10::IValue to_ivalue(const Run& run) {
  return c10::ivalue::Tuple::create(
      {to_ivalue(run.parameters), to_ivalue(run.buffers), run.grad_norms});
}

void from_ivalue(const c10::IValue& value, Run& out) {
  const auto& fields = value.toTupleRef().elements();
  out = Run{snapshots_from(fields[0]), snapshots_from(fields[1]), fields[2].toDoubleVector()};
}

double tolerance(const ShardingCase& c) {
  const bool rounds = c.param_dtype == "float32" || c.reduce_dtype == "float32";
  if (!rounds) return ddp_cases::kTolerance;
  return c.spec.batch_norm && c.param_dtype == "float32" ? 1e-3 : 1e-4;
}

double buffer_tolerance(const ShardingCase& c) {
  return c.buffer_dtype == "float32" ? std::max(tolerance(c), 1e-5) : tolerance(c);
}

std::optional<std::string> first_problem(const ShardingCase& c, const Run& expected,
                                         const std::vector<Run>& per_rank) {
  const int first = c.members.front();
  const Run& reference = per_rank[first];
  const std::string who = "rank " + std::to_string(first) + " against the serial run";
  if (auto problem = ddp_cases::first_departure(expected.parameters, reference.parameters, who,
                                                tolerance(c))) {
    return problem;
  }
  if (auto problem = ddp_cases::first_departure(expected.buffers, reference.buffers, who,
                                                buffer_tolerance(c))) {
    return problem;
  }
  for (size_t it = 0; it < expected.grad_norms.size(); ++it) {
    const double want = expected.grad_norms[it];
    const double got = reference.grad_norms[it];
    const bool both_absent = std::isnan(want) && std::isnan(got);
    if (!both_absent && !(std::abs(got - want) <= tolerance(c) * (1 + std::abs(want)))) {
      return "iteration " + std::to_string(it) + ": rank " + std::to_string(first) +
             " logged grad_norm " + std::to_string(got) + ", the serial run " +
             std::to_string(want);
    }
  }
  for (const int r : c.members) {
    for (auto part : {&Run::parameters, &Run::buffers}) {
      if (auto problem =
              ddp_cases::first_difference(reference.*part, first, per_rank[r].*part, r)) {
        return problem;
      }
    }
    for (size_t it = 0; it < expected.parameters.size(); ++it) {
      const double a = per_rank[r].grad_norms[it], b = reference.grad_norms[it];
      if (!(a == b || (std::isnan(a) && std::isnan(b)))) {
        return "iteration " + std::to_string(it) + ": rank " + std::to_string(r) +
               " logged another grad_norm than rank " + std::to_string(first);
      }
    }
  }
  return std::nullopt;
}

}  // namespace sharding_cases
