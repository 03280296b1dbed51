// N ranks with batch b each under MMDistributedDataParallel end every step
// with the parameters one process reaches on the concatenated batch of N*b.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>
#include <torch/torch.h>

#include "engine/model/batch_norm.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
#include "testing/harness.h"
#include "testing/model/nets.h"

namespace {

using engine::model::MMDistributedDataParallel;
using Snapshots = std::vector<std::map<std::string, at::Tensor>>;

struct TrainingCase {
  nets::NetSpec spec;
  int world_size = 1;
  int64_t batch = 1;
  int iterations = 1;
  int64_t accumulative_counts = 1;
  int64_t bucket_cap_bytes = 1;
  bool gradient_as_bucket_view = false;
  bool find_unused_parameters = false;
  std::vector<std::vector<std::vector<bool>>> used_heads;  // [iteration][rank][head]
  uint64_t seed = 0;
};

void showValue(const TrainingCase& c, std::ostream& os) {
  os << "world_size=" << c.world_size << " batch=" << c.batch << " iterations=" << c.iterations
     << " accumulative_counts=" << c.accumulative_counts
     << " bucket_cap_bytes=" << c.bucket_cap_bytes << " view=" << c.gradient_as_bucket_view
     << " find_unused=" << c.find_unused_parameters << " seed=" << c.seed
     << " net: " << nets::describe(c.spec);
}

rc::Gen<TrainingCase> training_case() {
  return rc::gen::exec([] {
    TrainingCase c;
    c.spec = *nets::net_spec();
    c.world_size = *rc::gen::element(1, 2, 2, 3, 4);
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

std::shared_ptr<torch::optim::Optimizer> sgd(torch::nn::Module& module) {
  return std::make_shared<torch::optim::SGD>(module.parameters(),
                                             torch::optim::SGDOptions(0.1).momentum(0.5));
}

engine::model::TensorDict batch_of(const TrainingCase& c, int iteration, int rank) {
  return nets::make_batch(c.spec, c.batch, c.seed * 1000 + iteration * 10 + rank,
                          c.used_heads[iteration][rank]);
}

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

// Tolerance: float64 throughout; DDP and the serial run differ only in the
// order in which per-sample gradient terms are summed and in dividing each
// rank's share by N before the sum: a few ulps (1e-16 relative) per step,
// over at most six SGD steps of lr 0.1 on values of order 1. 1e-9 leaves a
// millionfold margin, while any real fault (a missing average, a stale or
// misplaced bucket slot, an unsynced step) shows at 1e-3 or more.
constexpr double kTolerance = 1e-9;

RC_GTEST_PROP(DdpEquivalence, RanksMatchOneProcessOnTheConcatenatedBatch, ()) {
  const TrainingCase c = *training_case();
  auto initial = nets::make_net(c.spec);
  const Snapshots expected = train_serial(c, *initial);
  auto per_rank = harness::collect_ranks<Snapshots>(
      c.world_size, [&](int rank) { return train_rank(c, *initial, rank); },
      harness::test_options(c.seed));
  for (int it = 0; it < c.iterations; ++it) {
    for (const auto& [name, value] : expected[it]) {
      const at::Tensor& got = per_rank[0][it].at(name);
      if (!torch::allclose(got, value, kTolerance, kTolerance)) {
        RC_FAIL("iteration " + std::to_string(it) + " " + name +
                ": rank 0 differs from the serial "
                "run by " +
                std::to_string((got - value).abs().max().item<double>()));
      }
      for (int r = 1; r < c.world_size; ++r) {
        if (!torch::equal(per_rank[r][it].at(name), got)) {
          RC_FAIL("iteration " + std::to_string(it) + " " + name + ": rank " + std::to_string(r) +
                  " differs from rank 0 by " +
                  std::to_string((per_rank[r][it].at(name) - got).abs().max().item<double>()));
        }
      }
    }
  }
}

}  // namespace
