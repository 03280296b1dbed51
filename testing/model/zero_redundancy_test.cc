// ZeroRedundancyOptimizer beside DDP: every rank ends where the wrapped
// optimizer alone would have taken it, bit for bit, while holding the state
// of its own share only; the consolidated state is the wrapped optimizer's.
#include <ATen/ops/ones.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/scalar_tensor.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/output-archive.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/model/named_parameter.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/optim/builders.h"
#include "engine/optim/optim_wrapper.h"
#include "engine/optim/zero_redundancy_optimizer.h"
#include "engine/registry/config.h"
#include "testing/harness.h"
#include "testing/model/nets.h"
#include "testing/property.h"

namespace {

using engine::optim::ZeroRedundancyOptimizer;
using Optimizer = torch::optim::Optimizer;

std::shared_ptr<Optimizer> wrapped(bool adam, std::vector<at::Tensor> params) {
  if (adam) return std::make_shared<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
  return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
}

// Every tensor of the state, numbers as 0-dimensional tensors, in order.
void append_state(const engine::optim::OptimizerState& state, std::vector<at::Tensor>& out) {
  for (const auto& param : state.params) {
    for (const auto& item : param) {
      const c10::IValue& value = item.value();
      out.push_back(value.isTensor() ? value.toTensor()
                                     : at::scalar_tensor(value.toScalar().toDouble(), at::kDouble));
    }
  }
}

HARNESS_PROP(ZeroRedundancyOptimizer, EveryRankEndsAsTheWrappedOptimizerAloneWouldTakeIt, ()) {
  nets::NetSpec spec = *nets::net_spec();
  const int ranks = *rc::gen::inRange(1, harness::max_world_size(4) + 1);
  const bool adam = *rc::gen::arbitrary<bool>();
  const int steps = *rc::gen::inRange(1, 4);
  RC_TAG(ranks, adam ? "Adam" : "SGD");
  std::vector<bool> every_head(spec.heads, true);
  // Per rank: how many parameters its optimizer holds state for, the
  // parameters, and on rank 0 the whole state.
  auto run = [&](bool sharded) {
    return harness::collect_ranks<std::vector<at::Tensor>>(ranks, [&](int rank) {
      auto net = nets::make_net(spec);
      nets::scramble_state(*net, 7);
      auto ddp = std::make_shared<engine::model::MMDistributedDataParallel>(net);
      std::shared_ptr<Optimizer> optimizer =
          sharded ? std::make_shared<ZeroRedundancyOptimizer>(
                        engine::model::unique_parameters(*ddp),
                        [&](std::vector<at::Tensor> share) { return wrapped(adam, share); })
                  : wrapped(adam, engine::model::unique_parameters(*ddp));
      engine::optim::OptimWrapper optim(optimizer);
      for (int step = 0; step < steps; ++step) {
        ddp->train_step(nets::make_batch(spec, 2, 100 * step + rank, every_head), optim);
      }
      const auto* zero = dynamic_cast<ZeroRedundancyOptimizer*>(optimizer.get());
      int64_t stateful = 0;
      for (const auto& param :
           engine::optim::optimizer_state(zero ? zero->local() : *optimizer).params)
        stateful += param.empty() ? 0 : 1;
      std::vector<at::Tensor> out = {at::scalar_tensor(stateful, at::kLong)};
      for (const auto& param : net->parameters()) out.push_back(param.detach().clone());
      engine::optim::consolidate_if_sharded(*optimizer);
      if (rank == 0) append_state(engine::optim::optimizer_state(*optimizer), out);
      return out;
    });
  };
  const auto plain = run(false);
  const auto sharded = run(true);
  int64_t held = 0;
  for (int rank = 0; rank < ranks; ++rank) {
    RC_ASSERT(plain[rank].size() == sharded[rank].size());
    for (size_t i = 1; i < plain[rank].size(); ++i)
      RC_ASSERT(at::equal(plain[rank][i], sharded[rank][i]));
    held += sharded[rank][0].item<int64_t>();
  }
  // Each parameter's state lives on one rank only.
  RC_ASSERT(held == plain[0][0].item<int64_t>());
}

// PyTorch's partition: sizes 10, 3, 7, 7, 1 over two ranks.
TEST(ZeroRedundancyOptimizer, DealsParametersOutLargestFirstToTheLightestRank) {
  harness::run_ranks(2, [](int rank) {
    std::vector<at::Tensor> params;
    for (int64_t size : {10, 3, 7, 7, 1}) params.push_back(at::ones({size}).requires_grad_());
    ZeroRedundancyOptimizer zero(
        params, [](std::vector<at::Tensor> share) { return wrapped(false, share); });
    const std::vector<int> owners = {0, 0, 1, 1, 0};
    for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(zero.owner_of(i), owners[i]) << i;
    EXPECT_EQ(zero.local().param_groups()[0].params().size(), rank == 0 ? 3u : 2u);
  });
}

TEST(ZeroRedundancyOptimizer, StateIsReadOnlyWhereAndWhenConsolidated) {
  harness::run_ranks(2, [](int rank) {
    std::vector<at::Tensor> params = {at::ones({4}).requires_grad_(),
                                      at::ones({2}).requires_grad_()};
    ZeroRedundancyOptimizer zero(
        params, [](std::vector<at::Tensor> share) { return wrapped(false, share); });
    for (auto& param : params) param.mutable_grad() = at::ones_like(param);
    zero.step();
    EXPECT_THROW(engine::optim::optimizer_state(zero), engine::dist::InvalidArgument);
    zero.consolidate_state_dict(1);
    if (rank == 1) {
      EXPECT_EQ(engine::optim::optimizer_state(zero).params.size(), 2u);
    } else {
      EXPECT_THROW(engine::optim::optimizer_state(zero), engine::dist::InvalidArgument);
    }
    zero.step();  // the consolidated copy is stale now
    EXPECT_THROW(engine::optim::optimizer_state(zero), engine::dist::InvalidArgument);
    torch::serialize::OutputArchive archive;
    EXPECT_THROW(zero.save(archive), engine::dist::InvalidArgument);
  });
}

TEST(ZeroRedundancyOptimizer, ParametersASharderHoldsAreRefused) {
  harness::run_ranks(2, [](int) {
    auto net = nets::make_net({});
    engine::model::MMFullyShardedDataParallel fsdp(net);
    EXPECT_THROW(
        ZeroRedundancyOptimizer(
            fsdp.parameters(), [](std::vector<at::Tensor> share) { return wrapped(false, share); }),
        engine::dist::InvalidArgument);
  });
}

std::string config_error(const engine::registry::Json& config) {
  try {
    engine::optim::optimizers().build(config, {at::ones({2}).requires_grad_()});
  } catch (const engine::registry::ConfigError& error) {
    return error.what();
  }
  return "no error";
}

TEST(ZeroRedundancyOptimizer, ConfigsReadAsMmengineWritesThem) {
  auto built = engine::optim::optimizers().build({{"type", "ZeroRedundancyOptimizer"},
                                                  {"optimizer_type", "SGD"},
                                                  {"lr", 0.5},
                                                  {"momentum", 0.9},
                                                  {"parameters_as_bucket_view", true}},
                                                 {at::ones({2}).requires_grad_()});
  auto* zero = dynamic_cast<ZeroRedundancyOptimizer*>(built.get());
  ASSERT_NE(zero, nullptr);
  EXPECT_NE(dynamic_cast<const torch::optim::SGD*>(&zero->local()), nullptr);
  EXPECT_EQ(zero->param_groups()[0].options().get_lr(), 0.5);
  EXPECT_NE(config_error({{"type", "ZeroRedundancyOptimizer"}, {"lr", 0.5}})
                .find("lacks the required key \"optimizer_type\""),
            std::string::npos);
  EXPECT_NE(
      config_error(
          {{"type", "ZeroRedundancyOptimizer"}, {"optimizer_type", "SGD"}, {"lr", 1}, {"mom", 1}})
          .find("OPTIMIZERS (SGD) has unknown key(s) mom"),
      std::string::npos);
  EXPECT_NE(config_error({{"type", "ZeroRedundancyOptimizer"},
                          {"optimizer_type", "SGD"},
                          {"lr", 1},
                          {"overlap_with_ddp", true}})
                .find("\"overlap_with_ddp\" is not supported"),
            std::string::npos);
}

}  // namespace
