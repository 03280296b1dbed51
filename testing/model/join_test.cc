// Join with MMDistributedDataParallel, MMFullyShardedDataParallel and
// MMZeroDataParallel: ranks with different numbers of batches train, under
// every option that changes the collectives, to the single-process run that
// sums each iteration's gradients over the ranks still training and divides
// by the group size (PyTorch's weighting), and end with the same parameters
// and buffers on every rank; the failure modes are typed errors on every
// rank.
#include "engine/model/join/join.h"

#include <gtest/gtest.h>
// clang-format off
// clip_grad.h uses torch::Tensor without including its declaration.
#include <torch/types.h>
#include <torch/nn/utils/clip_grad.h>
// clang-format on
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/model/batch_norm.h"
#include "engine/model/comm_hooks/comm_hook.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/model/wrappers/zero_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
#include "engine/optim/zero_redundancy_optimizer.h"
#include "testing/harness.h"
#include "testing/model/nets.h"

namespace {

using engine::model::DDPOptions;
using engine::model::ForwardMode;
using engine::model::Join;
using engine::model::MMDistributedDataParallel;

// Batches per rank: uneven, the longest not on the first rank.
std::vector<int> batches_per_rank(int world) {
  std::vector<int> counts = {3, 1, 4, 2};
  counts.resize(world);
  return counts;
}
constexpr double kLr = 0.1;

nets::NetSpec join_net() {
  nets::NetSpec s;
  s.trunk = {5, 3};
  s.heads = 2;
  s.nested = true;  // a buffer ("forwards") that each rank's forwards move
  return s;
}

// On `device`: the harness's for the ranks (CUDA on nccl), the CPU for the
// serial run.
engine::model::TensorDict batch(int rank, int iteration, at::Device device = harness::device()) {
  engine::model::TensorDict out =
      nets::make_batch(join_net(), 3, 1000 * rank + iteration, {true, true});
  for (auto& [key, value] : out) value = value.to(device);
  return out;
}

std::map<std::string, at::Tensor> state_of(torch::nn::Module& module) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : module.named_parameters())
    out[item.key()] = item.value().detach().to(at::kCPU).clone();
  for (const auto& item : module.named_buffers())
    out[item.key()] = item.value().detach().to(at::kCPU).clone();
  return out;
}

// How the sharded runs step: accumulation, clipping and momentum, which
// the serial run repeats.
struct Stepping {
  int64_t accumulative_counts = 1;
  std::optional<double> max_norm;  // clip_grad by norm
  double momentum = 0;
};

// One process: each iteration, the gradients of the ranks that still have a
// batch, summed and divided by the group size (and by the accumulation
// group's size), a step at the end of each full accumulation group; the
// buffers as the rank that trains longest leaves them. Then `then_all`
// iterations of every rank, after the Join (accumulation groups go on
// across its end).
std::map<std::string, at::Tensor> serial_run(const nets::TestNet& initial,
                                             const std::vector<int>& counts,
                                             const Stepping& stepping = {}, int then_all = 0) {
  auto net = nets::make_net(join_net());
  nets::copy_state(const_cast<nets::TestNet&>(initial), *net);
  torch::optim::SGD sgd(net->parameters(),
                        torch::optim::SGDOptions(kLr).momentum(stepping.momentum));
  const int world = static_cast<int>(counts.size());
  const int longest = *std::max_element(counts.begin(), counts.end());
  const int64_t group = stepping.accumulative_counts;
  sgd.zero_grad();
  for (int it = 0; it < longest + then_all; ++it) {
    for (int rank = 0; rank < world; ++rank) {
      if (it >= counts[rank] && it < longest) continue;
      at::Tensor loss = net->forward(batch(rank, it, at::kCPU), ForwardMode::kLoss).at("loss");
      (loss / world / group).backward();
    }
    if ((it + 1) % group != 0) continue;
    if (stepping.max_norm) torch::nn::utils::clip_grad_norm_(net->parameters(), *stepping.max_norm);
    sgd.step();
    sgd.zero_grad();
  }
  return state_of(*net);
}

// Every rank's state equals the serial run's (the meter's forwards: the
// longest rank's, and `then_all` more), and rank 0's bit for bit.
void expect_serial_state(const std::vector<std::vector<at::Tensor>>& seen,
                         const std::map<std::string, at::Tensor>& expected,
                         const std::vector<int>& counts, int then_all = 0) {
  size_t i = 0;
  for (const auto& [name, want] : expected) {
    const at::Tensor& got = seen[0][i++];
    if (name == "body.meter.forwards") {
      EXPECT_EQ(got.item<double>(), *std::max_element(counts.begin(), counts.end()) + then_all);
      continue;
    }
    EXPECT_TRUE(torch::allclose(got, want, 1e-9, 1e-12))
        << name << ": " << got << "\nwanted " << want;
  }
  for (size_t rank = 1; rank < seen.size(); ++rank) {
    for (size_t t = 0; t < seen[0].size(); ++t) {
      EXPECT_TRUE(torch::equal(seen[rank][t], seen[0][t])) << "rank " << rank << ", tensor " << t;
    }
  }
}

std::vector<at::Tensor> state_list(torch::nn::Module& module) {
  std::vector<at::Tensor> state;
  for (const auto& [name, value] : state_of(module)) state.push_back(value);
  return state;
}

// One rank's copy of `initial` (built from `spec`), on the harness's device.
std::shared_ptr<nets::TestNet> rank_copy(nets::TestNet& initial,
                                         const nets::NetSpec& spec = join_net()) {
  auto net = nets::make_net(spec);
  nets::copy_state(initial, *net);
  net->to(harness::device());
  return net;
}

// A sharded wrapper's whole state by name: its parameters gathered, and the
// buffers of `net`, the module it wraps.
std::vector<at::Tensor> sharded_state_list(engine::model::MMFullyShardedDataParallel& wrapper,
                                           torch::nn::Module& net) {
  std::map<std::string, at::Tensor> state = wrapper.full_parameters();
  for (const auto& item : net.named_buffers()) state[item.key()] = item.value();
  std::vector<at::Tensor> values;
  for (const auto& [name, value] : state) values.push_back(value.detach().to(at::kCPU).clone());
  return values;
}

const Stepping kAccumulating{2, std::nullopt, 0.9};
const Stepping kClipping{1, 0.05, 0.9};

// Iterations every rank trains after the Join, each rank on batches of its
// own: a joined rank that lost count of the accumulation group would then
// reduce (or step) when the others do not.
constexpr int kThenAll = 3;

engine::optim::OptimWrapperOptions wrapper_options(const Stepping& stepping) {
  engine::optim::OptimWrapperOptions options;
  options.accumulative_counts = stepping.accumulative_counts;
  if (stepping.max_norm) {
    options.clip_grad = engine::optim::ClipGrad{};
    options.clip_grad->max_norm = *stepping.max_norm;
  }
  return options;
}

// This rank's batches under a Join, then kThenAll more on every rank.
void train_unevenly_then_all(engine::model::ModelWrapper& wrapper,
                             engine::optim::OptimWrapper& optim, int rank,
                             const std::vector<int>& counts) {
  const int longest = *std::max_element(counts.begin(), counts.end());
  {
    Join join({dynamic_cast<engine::model::Joinable*>(&wrapper)});
    for (int it = 0; it < counts[rank]; ++it) wrapper.train_step(batch(rank, it), optim);
    join.finish();
  }
  for (int it = longest; it < longest + kThenAll; ++it) wrapper.train_step(batch(rank, it), optim);
}

struct Variant {
  std::string name;
  DDPOptions options;
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (bool view : {false, true}) {
    for (bool find_unused : {false, true}) {
      for (bool static_graph : {false, true}) {
        DDPOptions options;
        options.gradient_as_bucket_view = view;
        options.find_unused_parameters = find_unused;
        options.static_graph = static_graph;
        options.bucket_cap_mb = 100.0 / (1 << 20);  // several buckets
        out.push_back({"view=" + std::to_string(view) + " find_unused=" +
                           std::to_string(find_unused) + " static=" + std::to_string(static_graph),
                       options});
      }
    }
  }
  return out;
}

TEST(Join, UnevenRanksTrainToTheSerialRunAndEndAlike) {
  const int world = harness::max_world_size(3);
  const std::vector<int> counts = batches_per_rank(world);
  torch::manual_seed(7);  // the same initial network in every process
  const auto initial = nets::make_net(join_net());
  const auto expected = serial_run(*initial, counts);
  for (const Variant& variant : variants()) {
    SCOPED_TRACE(variant.name);
    const auto seen = harness::collect_ranks<std::vector<at::Tensor>>(world, [&](int rank) {
      auto net = rank_copy(*initial);
      auto ddp = std::make_shared<MMDistributedDataParallel>(net, variant.options);
      engine::optim::OptimWrapper optim(
          std::make_shared<torch::optim::SGD>(ddp->parameters(), torch::optim::SGDOptions(kLr)));
      Join join({ddp.get()});
      for (int it = 0; it < counts[rank]; ++it) ddp->train_step(batch(rank, it), optim);
      join.finish();
      return state_list(*net);
    });
    expect_serial_state(seen, expected, counts);
  }
}

// A DDP rank that joined steps its optimizer wrapper with the gradients the
// others average, as they step theirs, after contributing what it had
// accumulated: ZeroRedundancyOptimizer's step, whose broadcasts need every
// rank, and accumulation groups that go on across the Join's end.
TEST(Join, DdpRanksThatJoinedStepTheirOptimizerAsTheOthersDo) {
  const int world = harness::max_world_size(3);
  const std::vector<int> counts = batches_per_rank(world);
  torch::manual_seed(7);
  const auto initial = nets::make_net(join_net());
  struct OptimizerVariant {
    std::string name;
    bool zero_redundancy;
    Stepping stepping;
  };
  for (const OptimizerVariant& variant :
       std::vector<OptimizerVariant>{{"SGD accumulating", false, kAccumulating},
                                     {"ZeroRedundancyOptimizer accumulating", true, kAccumulating},
                                     {"ZeroRedundancyOptimizer clipping", true, kClipping}}) {
    SCOPED_TRACE(variant.name);
    const auto expected = serial_run(*initial, counts, variant.stepping, kThenAll);
    const auto seen = harness::collect_ranks<std::vector<at::Tensor>>(world, [&](int rank) {
      auto net = rank_copy(*initial);
      DDPOptions options;
      options.bucket_cap_mb = 100.0 / (1 << 20);  // several buckets
      auto ddp = std::make_shared<MMDistributedDataParallel>(net, options);
      const auto sgd =
          [&](std::vector<at::Tensor> params) -> std::shared_ptr<torch::optim::Optimizer> {
        return std::make_shared<torch::optim::SGD>(
            params, torch::optim::SGDOptions(kLr).momentum(variant.stepping.momentum));
      };
      engine::optim::OptimWrapper optim(
          variant.zero_redundancy
              ? std::make_shared<engine::optim::ZeroRedundancyOptimizer>(ddp->parameters(), sgd)
              : sgd(ddp->parameters()),
          wrapper_options(variant.stepping));
      train_unevenly_then_all(*ddp, optim, rank, counts);
      return state_list(*net);
    });
    expect_serial_state(seen, expected, counts, kThenAll);
  }
}

// A sharded wrapper and how it steps.
struct ShardedVariant {
  std::string name;
  std::function<std::shared_ptr<engine::model::MMFullyShardedDataParallel>(
      std::shared_ptr<nets::TestNet>)>
      wrap;
  Stepping stepping;
};

std::shared_ptr<engine::model::MMFullyShardedDataParallel> fsdp(
    std::shared_ptr<nets::TestNet> net, engine::model::FSDPOptions options) {
  options.auto_wrap_policy.module_types = {"Linear"};
  return std::make_shared<engine::model::MMFullyShardedDataParallel>(std::move(net), options);
}

std::shared_ptr<engine::model::MMFullyShardedDataParallel> zero(std::shared_ptr<nets::TestNet> net,
                                                                int stage, bool overlap) {
  engine::model::ZeroOptions options;
  options.stage = stage;
  options.overlap_comm = overlap;
  options.reduce_bucket_size = 8;  // several buckets
  return std::make_shared<engine::model::MMZeroDataParallel>(std::move(net), options);
}

std::vector<ShardedVariant> sharded_variants() {
  using engine::model::FSDPOptions;
  using engine::model::ShardingStrategy;
  auto strategy = [](ShardingStrategy kind) {
    FSDPOptions options;
    options.sharding_strategy = kind;
    return options;
  };
  FSDPOptions prefetching = strategy(ShardingStrategy::kShardGradOp);
  prefetching.forward_prefetch = true;
  FSDPOptions hybrid = strategy(ShardingStrategy::kHybridShard);
  hybrid.hybrid_shard_size = 1;
  const Stepping plain, accumulating = kAccumulating, clipping = kClipping;
  return {
      {"FULL_SHARD", [](auto net) { return fsdp(net, FSDPOptions{}); }, plain},
      {"FULL_SHARD accumulating", [](auto net) { return fsdp(net, FSDPOptions{}); }, accumulating},
      {"FULL_SHARD clipping", [](auto net) { return fsdp(net, FSDPOptions{}); }, clipping},
      {"SHARD_GRAD_OP forward_prefetch", [=](auto net) { return fsdp(net, prefetching); },
       accumulating},
      {"NO_SHARD", [=](auto net) { return fsdp(net, strategy(ShardingStrategy::kNoShard)); },
       clipping},
      {"HYBRID_SHARD", [=](auto net) { return fsdp(net, hybrid); }, accumulating},
      {"ZeRO-1", [](auto net) { return zero(net, 1, false); }, accumulating},
      {"ZeRO-2", [](auto net) { return zero(net, 2, false); }, clipping},
      {"ZeRO-2 overlap_comm", [](auto net) { return zero(net, 2, true); }, accumulating},
  };
}

// A rank that joined runs its last step again with its loss times zero: it
// makes the others' collectives and steps its shard of the optimizer with
// their averaged gradients.
TEST(Join, ShardedWrappersTrainUnevenRanksToTheSerialRunAndEndAlike) {
  const int world = harness::max_world_size(3);
  const std::vector<int> counts = batches_per_rank(world);
  torch::manual_seed(7);
  const auto initial = nets::make_net(join_net());
  for (const ShardedVariant& variant : sharded_variants()) {
    SCOPED_TRACE(variant.name);
    const auto expected = serial_run(*initial, counts, variant.stepping, kThenAll);
    const auto seen = harness::collect_ranks<std::vector<at::Tensor>>(world, [&](int rank) {
      auto net = rank_copy(*initial);
      auto wrapper = variant.wrap(net);
      engine::optim::OptimWrapper optim(
          std::make_shared<torch::optim::SGD>(
              wrapper->parameters(),
              torch::optim::SGDOptions(kLr).momentum(variant.stepping.momentum)),
          wrapper_options(variant.stepping));
      train_unevenly_then_all(*wrapper, optim, rank, counts);
      return sharded_state_list(*wrapper, *net);
    });
    expect_serial_state(seen, expected, counts, kThenAll);
  }
}

TEST(Join, ARankThatJoinsWithoutABatchToShadowWithIsNamedOnEveryRank) {
  harness::run_ranks(2, [&](int rank) {
    auto net = nets::make_net(join_net());
    net->to(harness::device());
    auto wrapper = fsdp(net, engine::model::FSDPOptions{});
    engine::optim::OptimWrapper optim(
        std::make_shared<torch::optim::SGD>(wrapper->parameters(), torch::optim::SGDOptions(kLr)));
    Join join({wrapper.get()});
    try {
      for (int it = 0; it < (rank == 0 ? 2 : 0); ++it) wrapper->train_step(batch(rank, it), optim);
      join.finish();
      ADD_FAILURE() << "a rank without a batch to shadow with went unreported";
    } catch (const engine::dist::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 of"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("before its first training step"), std::string::npos)
          << e.what();
    }
  });
}

// A shadowing rank's SyncBatchNorm is normalised with the other ranks'
// statistics and adds none: rank 0's output is what its batch alone gives.
TEST(Join, AShadowingRankAddsNothingToSyncBatchNormStatistics) {
  const auto input_of = [](int rank) {
    return at::arange(12, at::kDouble)
        .reshape({4, 3})
        .mul(rank + 1)
        .add(rank * 5)
        .to(harness::device());
  };
  engine::model::BatchNorm local(engine::model::BatchNormOptions(3));
  local->to(at::kDouble);
  const at::Tensor alone = local->forward(input_of(0).to(at::kCPU));
  const auto seen = harness::collect_ranks<at::Tensor>(2, [&](int rank) {
    engine::model::BatchNorm norm(engine::model::BatchNormOptions(3));
    norm->to(harness::device(), at::kDouble);
    norm->synchronise(nullptr);
    if (rank == 0) return norm->forward(input_of(0)).to(at::kCPU);
    engine::model::ShadowScope shadowing;
    return norm->forward(input_of(1)).to(at::kCPU);
  });
  EXPECT_TRUE(torch::allclose(seen[0], alone, 1e-12, 1e-12)) << seen[0] << "\nwanted " << alone;
  EXPECT_FALSE(torch::allclose(seen[1], alone, 1e-6, 1e-6));
}

TEST(Join, ThrowOnEarlyTerminationThrowsOnEveryRankAtTheFirstUnevenIteration) {
  harness::run_ranks(2, [&](int rank) {
    auto net = nets::make_net(join_net());
    net->to(harness::device());
    auto ddp = std::make_shared<MMDistributedDataParallel>(net, DDPOptions{});
    engine::optim::OptimWrapper optim(
        std::make_shared<torch::optim::SGD>(ddp->parameters(), torch::optim::SGDOptions(kLr)));
    engine::model::JoinOptions options;
    options.throw_on_early_termination = true;
    Join join({ddp.get()}, options);
    try {
      for (int it = 0; it < (rank == 0 ? 3 : 1); ++it) ddp->train_step(batch(rank, it), optim);
      join.finish();
      ADD_FAILURE() << "an early termination went unreported";
    } catch (const engine::dist::DistError& e) {
      EXPECT_NE(std::string(e.what()).find("ran out of inputs"), std::string::npos) << e.what();
    }
  });
}

TEST(Join, ACommunicationHookIsRefusedOnEveryRank) {
  harness::run_ranks(2, [&](int rank) {
    auto net = nets::make_net(join_net());
    net->to(harness::device());
    DDPOptions options;
    options.comm_hook = engine::model::allreduce_hook();
    auto ddp = std::make_shared<MMDistributedDataParallel>(net, options);
    engine::optim::OptimWrapper optim(
        std::make_shared<torch::optim::SGD>(ddp->parameters(), torch::optim::SGDOptions(kLr)));
    Join join({ddp.get()});
    EXPECT_THROW(ddp->train_step(batch(rank, 0), optim), engine::dist::InvalidArgument);
  });
}

nets::NetSpec sync_batch_norm_net() {
  nets::NetSpec s = join_net();
  s.batch_norm = true;
  return s;
}

// DDP's joined ranks do not run the forward, so they cannot match a
// synchronised BatchNorm's collectives: refused on every rank, naming it.
TEST(Join, DdpRefusesSynchronisedBatchNormOnEveryRank) {
  harness::run_ranks(2, [&](int rank) {
    auto net = nets::make_net(sync_batch_norm_net());
    engine::model::convert_sync_batchnorm(*net);
    net->to(harness::device());
    auto ddp = std::make_shared<MMDistributedDataParallel>(net, DDPOptions{});
    engine::optim::OptimWrapper optim(
        std::make_shared<torch::optim::SGD>(ddp->parameters(), torch::optim::SGDOptions(kLr)));
    Join join({ddp.get()});
    try {
      ddp->train_step(batch(rank, 0), optim);
      ADD_FAILURE() << "DDP joined with a synchronised BatchNorm";
    } catch (const engine::dist::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("synchronised BatchNorm \"body.norm\""),
                std::string::npos)
          << e.what();
    }
  });
}

// Where DDP refuses, FSDP's NO_SHARD (DDP's training) joins: its shadowing
// ranks run the forward, adding nothing to the statistics.
TEST(Join, FsdpJoinsWithSynchronisedBatchNormAndEndsAlike) {
  const int world = harness::max_world_size(3);
  const std::vector<int> counts = batches_per_rank(world);
  torch::manual_seed(7);
  const auto initial = nets::make_net(sync_batch_norm_net());
  const auto seen = harness::collect_ranks<std::vector<at::Tensor>>(world, [&](int rank) {
    auto net = rank_copy(*initial, sync_batch_norm_net());
    engine::model::convert_sync_batchnorm(*net);
    engine::model::FSDPOptions options;
    options.sharding_strategy = engine::model::ShardingStrategy::kNoShard;
    auto wrapper = fsdp(net, options);
    engine::optim::OptimWrapper optim(
        std::make_shared<torch::optim::SGD>(wrapper->parameters(), torch::optim::SGDOptions(kLr)));
    train_unevenly_then_all(*wrapper, optim, rank, counts);
    return sharded_state_list(*wrapper, *net);
  });
  for (size_t t = 0; t < seen[0].size(); ++t) {
    EXPECT_TRUE(at::isfinite(seen[0][t]).all().item<bool>()) << "tensor " << t;
    for (int rank = 1; rank < world; ++rank) {
      EXPECT_TRUE(torch::equal(seen[rank][t], seen[0][t])) << "rank " << rank << ", tensor " << t;
    }
  }
}

// Without Join, a rank that runs out is named, not waited for forever. The
// simulator sees every rank, so it names the one that returned; in
// processes debug mode does (DIST_ENGINE_DEBUG=DETAIL: the harness's
// exchange after the body is a collective it compares with the others').
// Without debug mode, processes end at their backend's timeout, and the
// flight recorder's diagnosis names the rank (docs/debugging.md).
TEST(Join, WithoutItTheRankThatRanOutIsNamed) {
  const char* debug = std::getenv("DIST_ENGINE_DEBUG");
  if (harness::backend() != "sim" && !(debug && std::string(debug) == "DETAIL")) {
    GTEST_SKIP() << "names the rank in the simulator, and in processes in debug mode";
  }
  for (const bool sharded : {false, true}) {
    SCOPED_TRACE(sharded ? "FSDP" : "DDP");
    try {
      harness::run_ranks(2, [&](int rank) {
        auto net = nets::make_net(join_net());
        net->to(harness::device());
        std::shared_ptr<engine::model::ModelWrapper> wrapper;
        if (sharded) {
          wrapper = fsdp(net, engine::model::FSDPOptions{});
        } else {
          wrapper = std::make_shared<MMDistributedDataParallel>(net, DDPOptions{});
        }
        engine::optim::OptimWrapper optim(std::make_shared<torch::optim::SGD>(
            wrapper->parameters(), torch::optim::SGDOptions(kLr)));
        for (int it = 0; it < (rank == 0 ? 2 : 1); ++it)
          wrapper->train_step(batch(rank, it), optim);
      });
      ADD_FAILURE() << "a rank that ran out went unnoticed";
    } catch (const engine::dist::CollectiveMismatch& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 has returned from its body"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
