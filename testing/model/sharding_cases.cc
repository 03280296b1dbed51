#include "testing/model/sharding_cases.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "engine/model/batch_norm.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/model/wrappers/zero_data_parallel.h"
#include "engine/optim/optim_wrapper.h"

namespace sharding_cases {

using engine::model::MMFullyShardedDataParallel;

void showValue(const ShardingCase& c, std::ostream& os) {
  os << "world_size=" << c.world_size << " strategy=" << c.strategy
     << " hybrid_shard_size=" << c.hybrid_shard_size
     << " reduce_bucket_size=" << c.reduce_bucket_size << " overlap_comm=" << c.overlap_comm
     << " wrap=" << c.wrap << " min_num_params=" << c.min_num_params << " batch=" << c.batch
     << " iterations=" << c.iterations << " accumulative_counts=" << c.accumulative_counts
     << " communicate_every_step=" << c.communicate_every_step
     << " ignore_first_head=" << c.ignore_first_head << " freeze_first_bias=" << c.freeze_first_bias
     << " adam=" << c.adam << " clip_norm=" << (c.clip_norm ? std::to_string(*c.clip_norm) : "none")
     << " norm_type=" << c.norm_type << " seed=" << c.seed << " net: " << nets::describe(c.spec);
}

rc::Gen<ShardingCase> sharding_case(int max_world_size) {
  return rc::gen::exec([max_world_size] {
    ShardingCase c;
    c.spec = *nets::net_spec();
    c.strategy = *rc::gen::element<std::string>("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD",
                                                "HYBRID_SHARD", "ZERO_1", "ZERO_2");
    c.world_size = *rc::gen::inRange(1, max_world_size + 1);
    if (c.strategy == "HYBRID_SHARD") {
      c.hybrid_shard_size = c.world_size % 2 == 0 ? c.world_size / 2 : c.world_size;
    }
    c.reduce_bucket_size = *rc::gen::inRange<int64_t>(1, 200);
    c.overlap_comm = *rc::gen::arbitrary<bool>();
    c.wrap = *rc::gen::element<std::string>("root", "layers", "size");
    c.min_num_params = *rc::gen::inRange<int64_t>(1, 60);
    c.batch = *rc::gen::inRange<int64_t>(c.spec.batch_norm ? 2 : 1, 4);
    c.accumulative_counts = *rc::gen::inRange<int64_t>(1, 4);
    c.communicate_every_step = *rc::gen::arbitrary<bool>();
    c.iterations = *rc::gen::inRange<int>(c.accumulative_counts, 2 * c.accumulative_counts + 2);
    c.ignore_first_head = *rc::gen::arbitrary<bool>();
    c.freeze_first_bias = *rc::gen::arbitrary<bool>();
    c.adam = *rc::gen::arbitrary<bool>();
    if (*rc::gen::arbitrary<bool>()) c.clip_norm = *rc::gen::element(0.05, 1.0, 100.0);
    c.norm_type = *rc::gen::element(1.0, 2.0, 3.0, std::numeric_limits<double>::infinity());
    c.seed = *rc::gen::arbitrary<uint32_t>();
    for (int it = 0; it < c.iterations; ++it) {
      std::vector<bool> used(c.spec.heads);
      for (auto&& head : used) head = *rc::gen::arbitrary<bool>();
      used[*rc::gen::inRange<int64_t>(0, c.spec.heads)] = true;  // the loss needs one
      c.used_heads.push_back(used);
    }
    return c;
  });
}

namespace {

std::shared_ptr<torch::optim::Optimizer> optimizer_for(const ShardingCase& c,
                                                       torch::nn::Module& module) {
  if (c.adam) {
    return std::make_shared<torch::optim::Adam>(module.parameters(),
                                                torch::optim::AdamOptions(0.01));
  }
  return std::make_shared<torch::optim::SGD>(module.parameters(),
                                             torch::optim::SGDOptions(0.1).momentum(0.5));
}

engine::optim::OptimWrapperOptions wrapper_options(const ShardingCase& c) {
  engine::optim::OptimWrapperOptions options;
  options.accumulative_counts = c.accumulative_counts;
  if (c.clip_norm) {
    engine::optim::ClipGrad clip;
    clip.max_norm = *c.clip_norm;
    clip.norm_type = c.norm_type;
    options.clip_grad = clip;
  }
  return options;
}

std::shared_ptr<nets::TestNet> prepared_net(const ShardingCase& c) {
  auto net = nets::make_net(c.spec);
  if (c.freeze_first_bias) {
    net->named_parameters()[c.spec.image > 0 ? "conv.bias" : "trunk0.bias"].set_requires_grad(
        false);
  }
  return net;
}

engine::model::TensorDict batch_of(const ShardingCase& c, int iteration, int rank) {
  return nets::make_batch(c.spec, c.batch, c.seed * 1000 + iteration * 10 + rank,
                          c.used_heads[iteration]);
}

double grad_norm_of(const engine::optim::OptimWrapper& optim) {
  return optim.last_grad_norm().value_or(std::numeric_limits<double>::quiet_NaN());
}

engine::model::FSDPOptions fsdp_options(const ShardingCase& c, nets::TestNet& net) {
  engine::model::FSDPOptions options;
  options.sharding_strategy = engine::model::parse_sharding_strategy(c.strategy);
  options.hybrid_shard_size = c.hybrid_shard_size;
  options.sync_module_states = true;
  if (c.wrap == "layers") options.auto_wrap_policy.module_types = {"Linear", "Conv2d"};
  if (c.wrap == "size") options.auto_wrap_policy.min_num_params = c.min_num_params;
  if (c.ignore_first_head) options.ignored_modules = {net.named_children()["head0"].get()};
  return options;
}

std::shared_ptr<MMFullyShardedDataParallel> wrap(const ShardingCase& c,
                                                 std::shared_ptr<nets::TestNet> net) {
  if (c.strategy == "ZERO_1" || c.strategy == "ZERO_2") {
    engine::model::ZeroOptions options;
    options.stage = c.strategy == "ZERO_1" ? 1 : 2;
    options.reduce_bucket_size = c.reduce_bucket_size;
    options.overlap_comm = c.overlap_comm;
    return std::make_shared<engine::model::MMZeroDataParallel>(net, options);
  }
  return std::make_shared<MMFullyShardedDataParallel>(net, fsdp_options(c, *net));
}

}  // namespace

Run train_rank(const ShardingCase& c, const nets::TestNet& initial, int rank) {
  auto net = prepared_net(c);
  // Only rank 0 starts from `initial`: the wrapper must broadcast it.
  if (rank == 0) nets::copy_state(const_cast<nets::TestNet&>(initial), *net);
  if (c.spec.batch_norm) engine::model::convert_sync_batchnorm(*net);
  auto fsdp = wrap(c, net);
  engine::optim::OptimWrapper optim(optimizer_for(c, *fsdp), wrapper_options(c));
  Run run;
  for (int it = 0; it < c.iterations; ++it) {
    const auto batch = batch_of(c, it, rank);
    if (c.communicate_every_step) {
      auto parsed = engine::model::parse_losses(
          fsdp->forward(fsdp->preprocess(batch, true), engine::model::ForwardMode::kLoss));
      optim.update_params(parsed.loss);
    } else {
      fsdp->train_step(batch, optim);
    }
    run.parameters.push_back(fsdp->full_parameters());
    run.grad_norms.push_back(grad_norm_of(optim));
  }
  return run;
}

Run train_serial(const ShardingCase& c, nets::TestNet& initial) {
  auto net = prepared_net(c);
  nets::copy_state(initial, *net);
  engine::optim::OptimWrapper optim(optimizer_for(c, *net), wrapper_options(c));
  Run run;
  for (int it = 0; it < c.iterations; ++it) {
    std::vector<engine::model::TensorDict> batches;
    for (int r = 0; r < c.world_size; ++r) batches.push_back(batch_of(c, it, r));
    net->train_step(nets::concatenate(batches), optim);
    run.parameters.push_back(nets::snapshot(*net));
    run.grad_norms.push_back(grad_norm_of(optim));
  }
  return run;
}

c10::IValue to_ivalue(const Run& run) {
  c10::impl::GenericList steps(c10::AnyType::get());
  for (const auto& parameters : run.parameters) {
    c10::Dict<std::string, at::Tensor> dict;
    for (const auto& [name, value] : parameters) dict.insert(name, value);
    steps.push_back(dict);
  }
  return c10::ivalue::Tuple::create({steps, run.grad_norms});
}

void from_ivalue(const c10::IValue& value, Run& out) {
  const auto& fields = value.toTupleRef().elements();
  out = Run{};
  for (const auto& step : fields[0].toListRef()) {
    std::map<std::string, at::Tensor> parameters;
    for (const auto& item : step.toGenericDict()) {
      parameters[item.key().toStringRef()] = item.value().toTensor();
    }
    out.parameters.push_back(std::move(parameters));
  }
  out.grad_norms = fields[1].toDoubleVector();
}

std::optional<std::string> first_problem(const Run& expected, const std::vector<Run>& per_rank) {
  if (auto problem = ddp_cases::first_departure(expected.parameters, per_rank[0].parameters,
                                                "rank 0 against the serial run")) {
    return problem;
  }
  for (size_t it = 0; it < expected.grad_norms.size(); ++it) {
    const double want = expected.grad_norms[it];
    const double got = per_rank[0].grad_norms[it];
    const bool both_absent = std::isnan(want) && std::isnan(got);
    if (!both_absent && !(std::abs(got - want) <= ddp_cases::kTolerance * (1 + std::abs(want)))) {
      return "iteration " + std::to_string(it) + ": rank 0 logged grad_norm " +
             std::to_string(got) + ", the serial run " + std::to_string(want);
    }
  }
  for (size_t r = 1; r < per_rank.size(); ++r) {
    for (size_t it = 0; it < expected.parameters.size(); ++it) {
      for (const auto& [name, got] : per_rank[0].parameters[it]) {
        if (!torch::equal(per_rank[r].parameters[it].at(name), got)) {
          return "iteration " + std::to_string(it) + " " + name + ": rank " + std::to_string(r) +
                 " differs from rank 0";
        }
      }
      const double a = per_rank[r].grad_norms[it], b = per_rank[0].grad_norms[it];
      if (!(a == b || (std::isnan(a) && std::isnan(b)))) {
        return "iteration " + std::to_string(it) + ": rank " + std::to_string(r) +
               " logged another grad_norm than rank 0";
      }
    }
  }
  return std::nullopt;
}

}  // namespace sharding_cases
