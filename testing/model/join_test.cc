// Join with MMDistributedDataParallel: ranks with different numbers of
// batches train, under every reducer option that changes the collectives,
// to the single-process run that sums each iteration's gradients over the
// ranks still training and divides by the group size (PyTorch's weighting),
// and end with the same parameters and buffers on every rank; the failure
// modes are typed errors on every rank.
#include "engine/model/join/join.h"

#include <gtest/gtest.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/model/comm_hooks/comm_hook.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
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

// One process: each iteration, the gradients of the ranks that still have a
// batch, summed and divided by the group size; the buffers as the rank that
// trains longest leaves them.
std::map<std::string, at::Tensor> serial_run(const nets::TestNet& initial,
                                             const std::vector<int>& counts) {
  auto net = nets::make_net(join_net());
  nets::copy_state(const_cast<nets::TestNet&>(initial), *net);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(kLr));
  const int world = static_cast<int>(counts.size());
  const int longest = *std::max_element(counts.begin(), counts.end());
  for (int it = 0; it < longest; ++it) {
    sgd.zero_grad();
    for (int rank = 0; rank < world; ++rank) {
      if (it >= counts[rank]) continue;
      (net->forward(batch(rank, it, at::kCPU), ForwardMode::kLoss).at("loss") / world).backward();
    }
    sgd.step();
  }
  return state_of(*net);
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
      auto net = nets::make_net(join_net());
      nets::copy_state(*initial, *net);
      net->to(harness::device());
      auto ddp = std::make_shared<MMDistributedDataParallel>(net, variant.options);
      engine::optim::OptimWrapper optim(
          std::make_shared<torch::optim::SGD>(ddp->parameters(), torch::optim::SGDOptions(kLr)));
      Join join({ddp.get()});
      for (int it = 0; it < counts[rank]; ++it) ddp->train_step(batch(rank, it), optim);
      join.finish();
      std::vector<at::Tensor> state;
      for (const auto& [name, value] : state_of(*net)) state.push_back(value);
      return state;
    });
    size_t i = 0;
    for (const auto& [name, want] : expected) {
      const at::Tensor& got = seen[0][i++];
      if (name == "body.meter.forwards") {
        // The forwards of the rank that trained longest.
        EXPECT_EQ(got.item<double>(), *std::max_element(counts.begin(), counts.end()));
        continue;
      }
      EXPECT_TRUE(torch::allclose(got, want, 1e-9, 1e-12))
          << name << ": " << got << "\nwanted " << want;
    }
    for (int rank = 1; rank < world; ++rank) {
      for (size_t t = 0; t < seen[0].size(); ++t) {
        EXPECT_TRUE(torch::equal(seen[rank][t], seen[0][t])) << "rank " << rank << ", tensor " << t;
      }
    }
  }
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
  try {
    harness::run_ranks(2, [&](int rank) {
      auto net = nets::make_net(join_net());
      auto ddp = std::make_shared<MMDistributedDataParallel>(net, DDPOptions{});
      engine::optim::OptimWrapper optim(
          std::make_shared<torch::optim::SGD>(ddp->parameters(), torch::optim::SGDOptions(kLr)));
      for (int it = 0; it < (rank == 0 ? 2 : 1); ++it) ddp->train_step(batch(rank, it), optim);
    });
    ADD_FAILURE() << "a rank that ran out went unnoticed";
  } catch (const engine::dist::CollectiveMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 has returned from its body"), std::string::npos)
        << e.what();
  }
}

}  // namespace
