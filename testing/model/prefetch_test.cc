// FSDP's prefetching: where each mode issues a unit's all-gather (seen in
// the order of the collectives a rank issued and in the gathered bytes),
// the bound limit_all_gathers keeps, forward prefetching checked against
// the order rather than assumed, and the same order on a rank whose batch
// reaches none of a unit's parameters.
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <string>

#include "engine/dist/flight.h"
#include "engine/model/unit_call.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
#include "testing/harness.h"
#include "testing/model/nets.h"

namespace {

using engine::model::BackwardPrefetch;
using engine::model::FSDPOptions;
using engine::model::MMFullyShardedDataParallel;

// Every layer 4x4 with a bias: 20 float64 values, 160 bytes gathered.
constexpr int64_t kUnitBytes = 20 * 8;

nets::NetSpec three_layers(int64_t heads = 1) {
  nets::NetSpec spec;
  spec.inputs = 4;
  spec.trunk = {4, 4};
  spec.heads = heads;
  spec.outputs = 4;
  return spec;
}

FSDPOptions layer_units(BackwardPrefetch backward, bool forward) {
  FSDPOptions options;
  options.sync_module_states = true;
  options.auto_wrap_policy.module_types = {"Linear"};
  options.backward_prefetch = backward;
  options.forward_prefetch = forward;
  return options;
}

engine::optim::OptimWrapper sgd(MMFullyShardedDataParallel& fsdp) {
  return engine::optim::OptimWrapper(
      std::make_shared<torch::optim::SGD>(fsdp.parameters(), torch::optim::SGDOptions(0.1)));
}

// The all-gathers (G) and reduce-scatters (R) of float64 tensors this rank
// issued while `step` ran, in order.
template <typename Step>
std::string gathers_and_reductions(Step step) {
  const uint64_t before = engine::dist::flight_record().total;
  step();
  const auto record = engine::dist::flight_record();
  std::string order;
  for (size_t i = record.entries.size() - (record.total - before); i < record.entries.size(); ++i) {
    const auto& entry = record.entries[i];
    if (entry.dtype != "Double") continue;  // not the parameters' (a pickled object)
    if (entry.kind == "all_gather") order += 'G';
    if (entry.kind == "reduce_scatter") order += 'R';
  }
  return order;
}

struct PrefetchCase {
  BackwardPrefetch backward;
  bool forward;
  std::string backward_collectives;  // of the second step
  int peak_units;
};

// FULL_SHARD over three units A, B, C (the root holds nothing). Forward
// gathers A, B, C. Backward needs C, B, A: without prefetching each gather
// waits for the unit's backward and follows the previous unit's
// reduce-scatter; BACKWARD_PRE issues B's gather as C's backward begins
// (two units held), BACKWARD_POST as C's gradients are done and C is freed
// (one held); both put it before C's reduce-scatter. Forward prefetching
// holds the next unit while the current one runs.
TEST(FsdpPrefetch, EachModeIssuesTheNextGatherWhereItSays) {
  const std::vector<PrefetchCase> cases = {
      {BackwardPrefetch::kNone, false, "GRGRGR", 1},
      {BackwardPrefetch::kNone, true, "GRGRGR", 2},
      {BackwardPrefetch::kBackwardPre, false, "GGRGRR", 2},
      {BackwardPrefetch::kBackwardPost, false, "GGRGRR", 1},
      {BackwardPrefetch::kBackwardPost, true, "GGRGRR", 2},
  };
  harness::run_ranks(2, [&](int rank) {
    for (const auto& c : cases) {
      SCOPED_TRACE("backward_prefetch " + std::to_string(static_cast<int>(c.backward)) +
                   " forward_prefetch " + std::to_string(c.forward));
      const auto spec = three_layers();
      auto fsdp = std::make_shared<MMFullyShardedDataParallel>(nets::make_net(spec),
                                                               layer_units(c.backward, c.forward));
      ASSERT_EQ(fsdp->units().size(), 4u);
      ASSERT_EQ(fsdp->units()[0]->full_bytes(), 0);
      auto optim = sgd(*fsdp);
      const auto batch = nets::make_batch(spec, 2, rank, {true});
      fsdp->train_step(batch, optim);  // the first forward records the order
      fsdp->reset_peak_memory();
      engine::model::TensorDict outputs;
      EXPECT_EQ(gathers_and_reductions(
                    [&] { outputs = fsdp->forward(batch, engine::model::ForwardMode::kLoss); }),
                "GGG");
      EXPECT_EQ(gathers_and_reductions([&] { optim.update_params(outputs.at("loss")); }),
                c.backward_collectives);
      EXPECT_EQ(fsdp->memory().gathered_peak, c.peak_units * kUnitBytes);
      EXPECT_EQ(fsdp->memory().gathered_now, 0);
    }
  });
}

// A block unit around two inner units, each 4x4: the block stays gathered
// while the inner ones run, in forward and in backward.
class Nested : public engine::model::BaseModel {
 public:
  Nested() {
    block = register_module("block", std::make_shared<torch::nn::Module>());
    inner_a = block->register_module("a", torch::nn::Linear(4, 4));
    inner_b = block->register_module("b", torch::nn::Linear(4, 4));
    own = block->register_module("own", torch::nn::Linear(4, 4));
    to(torch::kDouble);
  }
  engine::model::TensorDict forward(const engine::model::TensorDict& data,
                                    engine::model::ForwardMode) override {
    at::Tensor x = data.at("inputs");
    x = engine::model::call_unit(*block, [&] {
      at::Tensor y = engine::model::call_unit(*inner_a, [&] { return torch::tanh(inner_a(x)); });
      y = engine::model::call_unit(*inner_b, [&] { return torch::tanh(inner_b(y)); });
      return own(y);
    });
    return {{"loss", (x * x).sum()}};
  }
  std::shared_ptr<torch::nn::Module> block;
  torch::nn::Linear inner_a{nullptr}, inner_b{nullptr}, own{nullptr};
};

// With both prefetches, the block, one inner unit and the next one would be
// gathered at once; limit_all_gathers leaves the third for when it is
// needed, so the root (empty here) and two units are the most held.
TEST(FsdpPrefetch, LimitAllGathersHoldsTheRootAndTwoUnits) {
  harness::run_ranks(2, [](int rank) {
    for (bool limit : {true, false}) {
      SCOPED_TRACE("limit_all_gathers " + std::to_string(limit));
      auto net = std::make_shared<Nested>();
      FSDPOptions options = layer_units(BackwardPrefetch::kBackwardPre, true);
      options.auto_wrap_policy.module_types.clear();
      options.auto_wrap_policy.modules = {net->block.get(), net->inner_a.get(), net->inner_b.get()};
      options.limit_all_gathers = limit;
      auto fsdp = std::make_shared<MMFullyShardedDataParallel>(net, options);
      ASSERT_EQ(fsdp->units().size(), 4u);
      auto optim = sgd(*fsdp);
      const engine::model::TensorDict batch = {
          {"inputs", torch::arange(8, torch::kDouble).reshape({2, 4}).add(rank) / 8}};
      fsdp->train_step(batch, optim);
      fsdp->reset_peak_memory();
      fsdp->train_step(batch, optim);
      EXPECT_EQ(fsdp->memory().gathered_peak, (limit ? 2 : 3) * kUnitBytes);
      EXPECT_EQ(fsdp->memory().gathered_now, 0);
    }
  });
}

std::map<std::string, at::Tensor> train(nets::TestNet& initial, const FSDPOptions& options,
                                        const std::vector<std::vector<bool>>& heads, int rank,
                                        std::vector<int64_t>* gathered_after_forward) {
  const auto spec = three_layers(2);
  auto net = nets::make_net(spec);
  nets::copy_state(initial, *net);
  auto fsdp = std::make_shared<MMFullyShardedDataParallel>(net, options);
  auto optim = sgd(*fsdp);
  for (size_t step = 0; step < heads.size(); ++step) {
    const auto batch = nets::make_batch(spec, 2, rank * 100 + step, heads[step]);
    const auto outputs = fsdp->forward(batch, engine::model::ForwardMode::kLoss);
    gathered_after_forward->push_back(fsdp->memory().gathered_now);
    optim.update_params(outputs.at("loss"));
  }
  return fsdp->full_parameters();
}

// The second forward skips the first head: forward prefetching gathered it
// after the trunk as the first forward ran, sees the departure and frees it;
// training is bit-identical to training without forward prefetching.
TEST(FsdpPrefetch, ForwardPrefetchFollowsTheOrderOnlyWhileItHolds) {
  const std::vector<std::vector<bool>> heads = {{true, true}, {false, true}, {true, false}};
  // Made here, not on the ranks: simulated ranks share one generator.
  const auto initial = nets::make_net(three_layers(2));
  harness::run_ranks(2, [&](int rank) {
    std::vector<int64_t> with_gathered, without_gathered;
    const auto with = train(*initial, layer_units(BackwardPrefetch::kBackwardPre, true), heads,
                            rank, &with_gathered);
    const auto without = train(*initial, layer_units(BackwardPrefetch::kBackwardPre, false), heads,
                               rank, &without_gathered);
    EXPECT_EQ(with_gathered, std::vector<int64_t>(heads.size(), 0));
    EXPECT_EQ(without_gathered, std::vector<int64_t>(heads.size(), 0));
    ASSERT_EQ(with.size(), without.size());
    for (const auto& [name, value] : with) {
      EXPECT_TRUE(at::equal(value, without.at(name))) << name;
    }
  });
}

// Two units in a row, the second of which, on some batches, takes a path
// that uses none of its parameters (a branch not taken, an expert nobody
// was routed to).
class SometimesSkips : public engine::model::BaseModel {
 public:
  SometimesSkips() {
    first = register_module("first", torch::nn::Linear(4, 4));
    second = register_module("second", torch::nn::Linear(4, 4));
    to(torch::kDouble);
  }
  engine::model::TensorDict forward(const engine::model::TensorDict& data,
                                    engine::model::ForwardMode) override {
    const bool use_second = data.at("use_second").item<bool>();
    at::Tensor x =
        engine::model::call_unit(*first, [&] { return torch::tanh(first(data.at("inputs"))); });
    x = engine::model::call_unit(
        *second, [&] { return use_second ? torch::tanh(second(x)) : torch::tanh(x); });
    return {{"loss", (x * x).sum()}};
  }
  torch::nn::Linear first{nullptr}, second{nullptr};
};

std::shared_ptr<SometimesSkips> copy_of(const SometimesSkips& initial) {
  auto net = std::make_shared<SometimesSkips>();
  torch::NoGradGuard no_grad;
  const auto from = initial.named_parameters();
  for (auto& item : net->named_parameters()) item.value().copy_(from[item.key()]);
  return net;
}

engine::model::TensorDict skipping_batch(int rank) {
  return {{"inputs", torch::arange(8, torch::kDouble).reshape({2, 4}).add(rank) / 8},
          {"use_second", torch::tensor(rank == 0)}};
}

// Rank 1's batch reaches none of the second unit's parameters. It still
// gathers that unit for its backward and reduce-scatters it after, as rank
// 0 does, rather than at the start of backward (where rank 0 gathers it: a
// collective mismatch), and both ranks end where one process ends on both
// batches with gradients averaged.
TEST(FsdpUnitOrder, ARankWhoseBatchSkipsAUnitReducesItWhereTheOthersDo) {
  // Seeded, for every process of a process run to start from the same.
  torch::manual_seed(0);
  const auto initial = std::make_shared<SometimesSkips>();
  harness::run_ranks(2, [&](int rank) {
    auto fsdp = std::make_shared<MMFullyShardedDataParallel>(
        copy_of(*initial), layer_units(BackwardPrefetch::kBackwardPre, false));
    ASSERT_EQ(fsdp->units().size(), 3u);
    auto optim = sgd(*fsdp);
    auto reference = copy_of(*initial);
    torch::optim::SGD reference_optim(reference->parameters(), torch::optim::SGDOptions(0.1));
    for (int step = 0; step < 2; ++step) {
      const auto outputs = fsdp->forward(skipping_batch(rank), engine::model::ForwardMode::kLoss);
      EXPECT_EQ(gathers_and_reductions([&] { optim.update_params(outputs.at("loss")); }), "GGRR")
          << "step " << step;
      reference_optim.zero_grad();
      for (int r = 0; r < 2; ++r) {
        reference->forward(skipping_batch(r), engine::model::ForwardMode::kLoss)
            .at("loss")
            .div(2)
            .backward();
      }
      reference_optim.step();
    }
    const auto reference_parameters = reference->named_parameters();
    for (const auto& [name, value] : fsdp->full_parameters()) {
      EXPECT_TRUE(at::equal(value, reference_parameters[name])) << name;
    }
  });
}

}  // namespace
