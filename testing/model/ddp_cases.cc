#include "testing/model/ddp_cases.h"

#include <torch/torch.h>

#include "engine/model/batch_norm.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/optim/optim_wrapper.h"

namespace ddp_cases {

using engine::model::MMDistributedDataParallel;

void showValue(const TrainingCase& c, std::ostream& os) {
  os << "world_size=" << c.world_size << " batch=" << c.batch << " iterations=" << c.iterations
     << " accumulative_counts=" << c.accumulative_counts
     << " bucket_cap_bytes=" << c.bucket_cap_bytes << " view=" << c.gradient_as_bucket_view
     << " find_unused=" << c.find_unused_parameters << " seed=" << c.seed
     << " net: " << nets::describe(c.spec);
}

rc::Gen<TrainingCase> training_case(std::optional<int> world_size) {
  return rc::gen::exec([world_size] {
    TrainingCase c;
    c.spec = *nets::net_spec();
    c.world_size = world_size ? *world_size : *rc::gen::element(1, 2, 2, 3, 4);
    c.batch = *rc::gen::inRange<int64_t>(c.spec.batch_norm ? 2 : 1, 5);
    c.accumulative_counts = *rc::gen::inRange<int64_t>(1, 4);
    // At least one optimizer step, and sometimes a last partial group.
    c.iterations = *rc::gen::inRange<int>(c.accumulative_counts, 2 * c.accumulative_counts + 2);
    c.bucket_cap_bytes = *rc::gen::element<int64_t>(8, 100, 1000, int64_t{25} << 20);
    c.gradient_as_bucket_view = *rc::gen::arbitrary<bool>();
    c.find_unused_parameters = *rc::gen::arbitrary<bool>();
    c.seed = *rc::gen::arbitrary<uint32_t>();
    for (int it = 0; it < c.iterations; ++it) {
      c.used_heads.emplace_back();
      for (int r = 0; r < c.world_size; ++r) {
        std::vector<bool> used(c.spec.heads, true);
        if (c.find_unused_parameters) {
          for (auto&& head : used) head = *rc::gen::arbitrary<bool>();
          used[*rc::gen::inRange<int64_t>(0, c.spec.heads)] = true;  // the loss needs one
        }
        c.used_heads.back().push_back(used);
      }
    }
    return c;
  });
}

namespace {

std::shared_ptr<torch::optim::Optimizer> sgd(torch::nn::Module& module) {
  return std::make_shared<torch::optim::SGD>(module.parameters(),
                                             torch::optim::SGDOptions(0.1).momentum(0.5));
}

engine::model::TensorDict batch_of(const TrainingCase& c, int iteration, int rank) {
  return nets::make_batch(c.spec, c.batch, c.seed * 1000 + iteration * 10 + rank,
                          c.used_heads[iteration][rank]);
}

}  // namespace

Snapshots train_rank(const TrainingCase& c, const nets::TestNet& initial, int rank) {
  auto net = nets::make_net(c.spec);
  // Only rank 0 starts from `initial`: the wrapper must broadcast it.
  if (rank == 0) nets::copy_state(const_cast<nets::TestNet&>(initial), *net);
  if (c.spec.batch_norm) engine::model::convert_sync_batchnorm(*net);
  engine::model::DDPOptions options;
  options.bucket_cap_mb = double(c.bucket_cap_bytes) / (1 << 20);
  options.gradient_as_bucket_view = c.gradient_as_bucket_view;
  options.find_unused_parameters = c.find_unused_parameters;
  auto ddp = std::make_shared<MMDistributedDataParallel>(net, options);
  engine::optim::OptimWrapper optim(sgd(*ddp), {c.accumulative_counts, std::nullopt});
  Snapshots snapshots;
  for (int it = 0; it < c.iterations; ++it) {
    ddp->train_step(batch_of(c, it, rank), optim);
    snapshots.push_back(nets::snapshot(*net));
  }
  return snapshots;
}

Snapshots train_serial(const TrainingCase& c, nets::TestNet& initial) {
  auto net = nets::make_net(c.spec);
  nets::copy_state(initial, *net);
  engine::optim::OptimWrapper optim(sgd(*net), {c.accumulative_counts, std::nullopt});
  Snapshots snapshots;
  for (int it = 0; it < c.iterations; ++it) {
    std::vector<engine::model::TensorDict> batches;
    for (int r = 0; r < c.world_size; ++r) batches.push_back(batch_of(c, it, r));
    net->train_step(nets::concatenate(batches), optim);
    snapshots.push_back(nets::snapshot(*net));
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

}  // namespace ddp_cases
