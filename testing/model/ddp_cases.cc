#include "testing/model/ddp_cases.h"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "engine/dist/info.h"
#include "engine/model/batch_norm.h"
#include "engine/model/named_parameter.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
#include "testing/cases.h"

namespace ddp_cases {

using engine::model::MMDistributedDataParallel;

void showValue(const TrainingCase& c, std::ostream& os) {
  os << "world_size=" << c.world_size << " batch=" << c.batch << " iterations=" << c.iterations
     << " accumulative_counts=" << c.accumulative_counts
     << " bucket_cap_bytes=" << c.bucket_cap_bytes << " view=" << c.gradient_as_bucket_view
     << " find_unused=" << c.find_unused_parameters << " static_graph=" << c.static_graph
     << " broadcast_buffers=" << c.broadcast_buffers << " comm_hook=" << c.comm_hook
     << " clip_grad=" << describe(c.clip_grad) << " members=" << describe(c.members)
     << " seed=" << c.seed << " net: " << nets::describe(c.spec);
}

rc::Gen<std::optional<engine::optim::ClipGrad>> clip_grad() {
  return rc::gen::mapcat(rc::gen::element<std::string>("none", "norm", "value"),
                         [](const std::string& kind) { return clip_grad(kind); });
}

rc::Gen<std::optional<engine::optim::ClipGrad>> clip_grad(const std::string& kind) {
  using engine::optim::ClipGrad;
  return rc::gen::exec([kind]() -> std::optional<ClipGrad> {
    if (kind == "none") return std::nullopt;
    ClipGrad clip;
    if (kind == "norm") {
      clip.max_norm = *rc::gen::element(0.05, 1.0, 100.0);
      clip.norm_type = *rc::gen::element(1.0, 2.0, 3.0, std::numeric_limits<double>::infinity());
    } else {
      clip.kind = ClipGrad::Kind::kValue;
      clip.clip_value = *rc::gen::element(0.001, 0.01, 100.0);
    }
    return clip;
  });
}

std::string describe(const std::vector<int>& members) {
  std::string out = "[";
  for (size_t i = 0; i < members.size(); ++i) out += (i ? "," : "") + std::to_string(members[i]);
  return out + "]";
}

std::string describe(const std::optional<engine::optim::ClipGrad>& clip) {
  if (!clip) return "none";
  if (clip->kind == engine::optim::ClipGrad::Kind::kValue) {
    return "value " + std::to_string(clip->clip_value);
  }
  return "norm " + std::to_string(clip->max_norm) + " type " + std::to_string(clip->norm_type);
}

namespace {

// The grid's options and their values, groups of up to `largest_group`.
std::vector<pairwise::Factor> grid_factors(int largest_group) {
  auto factors = cases::placement_factors(largest_group);
  factors.insert(factors.end(), {{"bucket_cap_bytes", {"8", "100", "1000", "26214400"}},
                                 {"gradient_as_bucket_view", {"off", "on"}},
                                 {"find_unused_parameters", {"off", "on"}},
                                 {"static_graph", {"off", "on"}},
                                 {"broadcast_buffers", {"off", "on"}},
                                 {"comm_hook", {"none", "allreduce"}},
                                 {"clip_grad", {"none", "norm", "value"}},
                                 {"accumulation", {"1", "2-3"}}});
  return factors;
}

// A case with `values` on `members` of a world of `world_size`, random
// draws for the rest.
TrainingCase case_with(int world_size, std::vector<int> members, const pairwise::Values& values) {
  TrainingCase c;
  c.spec = *nets::net_spec();
  c.world_size = world_size;
  c.members = std::move(members);
  c.batch = *rc::gen::inRange<int64_t>(c.spec.batch_norm ? 2 : 1, 5);
  c.accumulative_counts = values.at("accumulation") == "1" ? 1 : *rc::gen::inRange<int64_t>(2, 4);
  // At least one optimizer step, and sometimes a last partial group.
  c.iterations = *rc::gen::inRange<int>(c.accumulative_counts, 2 * c.accumulative_counts + 2);
  c.bucket_cap_bytes = std::stoll(values.at("bucket_cap_bytes"));
  c.gradient_as_bucket_view = values.at("gradient_as_bucket_view") == "on";
  c.find_unused_parameters = values.at("find_unused_parameters") == "on";
  c.static_graph = values.at("static_graph") == "on";
  c.broadcast_buffers = values.at("broadcast_buffers") == "on";
  c.comm_hook = values.at("comm_hook");
  c.clip_grad = *clip_grad(values.at("clip_grad"));
  c.seed = *rc::gen::arbitrary<uint32_t>();
  for (int it = 0; it < c.iterations; ++it) {
    c.used_heads.emplace_back();
    for (size_t seat = 0; seat < c.members.size(); ++seat) {
      std::vector<bool> used(c.spec.heads, true);
      if (c.static_graph && it > 0) {
        used = c.used_heads.front()[seat];
      } else if (c.find_unused_parameters) {
        for (auto&& head : used) head = *rc::gen::arbitrary<bool>();
        used[*rc::gen::inRange<int64_t>(0, c.spec.heads)] = true;  // the loss needs one
      }
      c.used_heads.back().push_back(used);
    }
    c.head_order.push_back(head_orders(static_cast<int>(c.members.size()), c.spec.heads));
  }
  return c;
}

}  // namespace

rc::Gen<TrainingCase> training_case(std::optional<int> world_size) {
  return rc::gen::exec([world_size] {
    const int world = world_size ? *world_size : *rc::gen::element(1, 2, 2, 3, 4);
    const auto members = *cases::world_or_subgroup(world);
    const auto values = pairwise::draw(grid_factors(1), [](const auto&) { return true; });
    return case_with(world, members, values);
  });
}

pairwise::Grid ddp_grid(int max_world_size) {
  return pairwise::covering_grid(
      grid_factors(std::min(max_world_size, 4)),
      [&](const pairwise::Values& values) { return cases::placement_fits(values, max_world_size); },
      {{"group_size", "clip_grad", "find_unused_parameters"}, {"static_graph", "accumulation"}});
}

rc::Gen<TrainingCase> training_case(const pairwise::Grid& grid, const pairwise::Row& row,
                                    int max_world_size) {
  const auto values = pairwise::named(grid.factors, row);
  return rc::gen::exec([values, max_world_size] {
    auto placed = *cases::placement(values, max_world_size);
    return case_with(placed.world_size, std::move(placed.members), values);
  });
}

std::vector<std::vector<int64_t>> head_orders(int world_size, int64_t heads) {
  std::vector<std::vector<int64_t>> orders;
  for (int r = 0; r < world_size; ++r) {
    std::vector<int64_t> order(heads);
    std::iota(order.begin(), order.end(), 0);
    for (int64_t i = heads - 1; i > 0; --i) {
      std::swap(order[i], order[*rc::gen::inRange<int64_t>(0, i + 1)]);
    }
    orders.push_back(order);
  }
  return orders;
}

engine::model::TensorDict batch_of(const TrainingCase& c, int iteration, int seat) {
  return nets::make_batch(c.spec, c.batch, c.seed * 1000 + iteration * 10 + seat,
                          c.used_heads[iteration][seat], c.head_order[iteration][seat]);
}

void set_starting_state(nets::TestNet& net, const nets::TestNet& initial, int seat,
                        uint64_t case_seed, int rank) {
  if (seat == 0) {
    nets::copy_state(const_cast<nets::TestNet&>(initial), net);
  } else {
    nets::scramble_state(net, case_seed * 7919 + rank);
  }
}

namespace {

std::shared_ptr<torch::optim::Optimizer> sgd(torch::nn::Module& module) {
  return std::make_shared<torch::optim::SGD>(engine::model::unique_parameters(module),
                                             torch::optim::SGDOptions(0.1).momentum(0.5));
}

std::map<std::string, at::Tensor> state_of(torch::nn::Module& module) {
  auto state = nets::snapshot(module);
  state.merge(nets::buffers_of(module));
  return state;
}

}  // namespace

Snapshots train_rank(const TrainingCase& c, const nets::TestNet& initial, int rank) {
  const engine::dist::GroupPtr group = cases::group_of(c.world_size, c.members);
  const int seat = cases::seat_of(c.members, rank);
  if (seat < 0) return {};
  auto net = nets::make_net(c.spec);
  if (c.spec.batch_norm) engine::model::convert_sync_batchnorm(*net, group);
  set_starting_state(*net, initial, seat, c.seed, rank);
  net->to(engine::dist::get_comm_device(group));  // as DDPStrategy places it
  engine::model::DDPOptions options;
  options.bucket_cap_mb = double(c.bucket_cap_bytes) / (1 << 20);
  options.gradient_as_bucket_view = c.gradient_as_bucket_view;
  options.find_unused_parameters = c.find_unused_parameters;
  options.static_graph = c.static_graph;
  options.broadcast_buffers = c.broadcast_buffers;
  if (c.comm_hook == "allreduce") options.comm_hook = engine::model::allreduce_hook();
  options.process_group = group;
  auto ddp = std::make_shared<MMDistributedDataParallel>(net, options);
  engine::optim::OptimWrapper optim(sgd(*ddp), {c.accumulative_counts, c.clip_grad});
  Snapshots snapshots;
  for (int it = 0; it < c.iterations; ++it) {
    ddp->train_step(batch_of(c, it, seat), optim);
    snapshots.push_back(on_cpu(state_of(*net)));
  }
  return snapshots;
}

Snapshots train_serial(const TrainingCase& c, nets::TestNet& initial) {
  auto net = nets::make_net(c.spec);
  nets::copy_state(initial, *net);
  engine::optim::OptimWrapper optim(sgd(*net), {c.accumulative_counts, c.clip_grad});
  Snapshots snapshots;
  for (int it = 0; it < c.iterations; ++it) {
    std::vector<engine::model::TensorDict> batches;
    for (size_t seat = 0; seat < c.members.size(); ++seat) {
      batches.push_back(batch_of(c, it, static_cast<int>(seat)));
    }
    net->train_step(nets::concatenate(batches), optim);
    snapshots.push_back(state_of(*net));
  }
  return snapshots;
}

std::shared_ptr<nets::TestNet> initial_net(const TrainingCase& c) {
  torch::manual_seed(c.seed);
  return nets::make_net(c.spec);
}

std::optional<std::string> first_departure(const Snapshots& expected, const Snapshots& got,
                                           const std::string& who, double tolerance) {
  for (size_t it = 0; it < expected.size(); ++it) {
    for (const auto& [name, value] : expected[it]) {
      const at::Tensor& mine = got[it].at(name);
      if (!torch::allclose(mine, value, tolerance, tolerance)) {
        return "iteration " + std::to_string(it) + " " + name + ": " + who + " differs by " +
               std::to_string((mine - value).abs().max().item<double>());
      }
    }
  }
  return std::nullopt;
}

std::map<std::string, at::Tensor> on_cpu(std::map<std::string, at::Tensor> tensors) {
  for (auto& [name, value] : tensors) value = value.cpu();
  return tensors;
}

std::optional<std::string> first_difference(const Snapshots& first, int first_rank,
                                            const Snapshots& other, int rank) {
  for (size_t it = 0; it < first.size(); ++it) {
    for (const auto& [name, value] : first[it]) {
      const at::Tensor& mine = other[it].at(name);
      if (!torch::equal(mine, value)) {
        return "iteration " + std::to_string(it) + " " + name + ": rank " + std::to_string(rank) +
               " differs from rank " + std::to_string(first_rank) + " by " +
               std::to_string((mine - value).abs().max().item<double>());
      }
    }
  }
  return std::nullopt;
}

}  // namespace ddp_cases
