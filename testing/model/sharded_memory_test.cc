// What each rank holds under sharding: FULL_SHARD's gathered buffers stay
// within the root and two units, and the model-state bytes (parameters,
// gradients, Adam's state) per rank follow the ZeRO formulas.
#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <algorithm>

#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/model/wrappers/zero_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
#include "engine/optim/optimizer_state.h"
#include "testing/harness.h"
#include "testing/model/nets.h"

namespace {

using engine::model::MMFullyShardedDataParallel;

// FULL_SHARD holds at most the root and two units gathered (here, after
// the first step has shown which layers run through call_unit), and each of
// 4 ranks holds a quarter of the parameters, plus padding. With and without
// mixed precision, whose gathered parameters have another dtype than the
// shards.
class FsdpMemory : public ::testing::TestWithParam<bool> {};

TEST_P(FsdpMemory, GatheredPeakIsBoundedAndShardsAreAQuarter) {
  const bool cast = GetParam();
  nets::NetSpec spec;
  spec.inputs = 8;
  spec.trunk = {32, 31, 30};
  spec.heads = 2;
  spec.outputs = 5;
  harness::run_ranks(4, [&](int rank) {
    auto net = nets::make_net(spec);
    engine::model::FSDPOptions options;
    options.sync_module_states = true;
    options.auto_wrap_policy.module_types = {"Linear"};
    if (cast) options.mixed_precision.param_dtype = at::kFloat;
    auto fsdp = std::make_shared<MMFullyShardedDataParallel>(net, options);
    engine::optim::OptimWrapper optim(
        std::make_shared<torch::optim::SGD>(fsdp->parameters(), torch::optim::SGDOptions(0.1)));
    const auto batch = nets::make_batch(spec, 2, rank, {true, true});
    fsdp->train_step(batch, optim);
    EXPECT_EQ(fsdp->memory().gathered_now, 0);
    fsdp->reset_peak_memory();
    fsdp->train_step(batch, optim);
    std::vector<int64_t> unit_bytes;
    for (size_t u = 1; u < fsdp->units().size(); ++u) {
      unit_bytes.push_back(fsdp->units()[u]->full_bytes());
    }
    ASSERT_GE(unit_bytes.size(), 2u);
    std::sort(unit_bytes.rbegin(), unit_bytes.rend());
    const auto memory = fsdp->memory();
    EXPECT_GT(memory.gathered_peak, 0);
    EXPECT_LE(memory.gathered_peak, fsdp->units()[0]->full_bytes() + unit_bytes[0] + unit_bytes[1]);
    int64_t full = 0, padding = 0;
    for (const auto& unit : fsdp->units()) {
      for (size_t i = 0; i < unit->parameters().size(); ++i) {
        const auto& layout = unit->layout(i);
        full += layout.full_numel() * 8;
        padding += (layout.chunk_rows * 4 - layout.rows) * layout.row_numel * 8;
      }
    }
    EXPECT_GE(memory.sharded_parameters * 4, full);
    EXPECT_LE(memory.sharded_parameters * 4, full + padding);
    EXPECT_EQ(memory.sharded_gradients, memory.sharded_parameters);
  });
}

INSTANTIATE_TEST_SUITE_P(ParamDtype, FsdpMemory, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "float32" : "own"; });

}  // namespace

namespace {

// Bytes of every tensor in the optimizer's state on this rank.
int64_t optimizer_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& values : engine::optim::optimizer_state(optimizer).params) {
    for (const auto& item : values) {
      if (item.value().isTensor()) bytes += item.value().toTensor().nbytes();
    }
  }
  return bytes;
}

// Every dimension a multiple of 4, so that 4 ranks shard without padding.
nets::NetSpec divisible_net() {
  nets::NetSpec spec;
  spec.inputs = 8;
  spec.trunk = {32, 28};
  spec.heads = 1;
  spec.outputs = 4;
  return spec;
}

struct ModelState {
  int64_t parameters = 0;  // every parameter's bytes, whole
  int64_t held = 0;        // what this rank holds: parameters, gradients, Adam's state
  int64_t unsharded_gradients = 0;
};

// One rank of 4 after `micro_batches` train steps with Adam and
// accumulative_counts 2 under `wrap`.
template <typename Wrap>
ModelState model_state_after(int rank, int micro_batches, Wrap wrap) {
  const nets::NetSpec spec = divisible_net();
  std::shared_ptr<engine::model::MMFullyShardedDataParallel> wrapper = wrap(nets::make_net(spec));
  engine::optim::OptimWrapperOptions options;
  options.accumulative_counts = 2;
  engine::optim::OptimWrapper optim(
      std::make_shared<torch::optim::Adam>(wrapper->parameters(), torch::optim::AdamOptions(0.01)),
      options);
  for (int step = 0; step < micro_batches; ++step) {
    wrapper->train_step(nets::make_batch(spec, 2, rank * 10 + step, {true}), optim);
  }
  const auto memory = wrapper->memory();
  ModelState state;
  for (const auto& unit : wrapper->units()) state.parameters += unit->full_bytes();
  state.held = memory.sharded_parameters + memory.gathered_now + memory.sharded_gradients +
               memory.unsharded_gradients + optimizer_bytes(optim.optimizer());
  state.unsharded_gradients = memory.unsharded_gradients;
  return state;
}

std::shared_ptr<engine::model::MMFullyShardedDataParallel> zero(
    int stage, std::shared_ptr<nets::TestNet> net) {
  engine::model::ZeroOptions options;
  options.stage = stage;
  options.reduce_bucket_size = 100;
  return std::make_shared<engine::model::MMZeroDataParallel>(net, options);
}

std::shared_ptr<engine::model::MMFullyShardedDataParallel> fsdp(
    engine::model::ShardingStrategy strategy, std::shared_ptr<nets::TestNet> net) {
  engine::model::FSDPOptions options;
  options.sharding_strategy = strategy;
  options.sync_module_states = true;
  options.auto_wrap_policy.module_types = {"Linear"};
  return std::make_shared<engine::model::MMFullyShardedDataParallel>(net, options);
}

// Ψ bytes of parameters, Adam: gradients Ψ, moments 2Ψ. Per rank of N = 4:
// DDP (NO_SHARD) 4Ψ; ZeRO-1 Ψ + Ψ + 2Ψ/N inside an accumulation group and
// Ψ + 3Ψ/N after the step (the reduced gradients are sharded); ZeRO-2
// Ψ + 3Ψ/N; FULL_SHARD 4Ψ/N (no unit gathered between steps).
TEST(ShardedMemory, ModelStateBytesFollowTheZeroFormulas) {
  harness::run_ranks(4, [](int rank) {
    using engine::model::ShardingStrategy;
    auto no_shard = [](auto net) { return fsdp(ShardingStrategy::kNoShard, net); };
    auto full_shard = [](auto net) { return fsdp(ShardingStrategy::kFullShard, net); };
    auto stage1 = [](auto net) { return zero(1, net); };
    auto stage2 = [](auto net) { return zero(2, net); };
    const ModelState ddp = model_state_after(rank, 2, no_shard);
    const int64_t psi = ddp.parameters;
    EXPECT_EQ(ddp.held, 4 * psi);
    EXPECT_EQ(model_state_after(rank, 2, full_shard).held, psi);
    const ModelState stage1_in_group = model_state_after(rank, 3, stage1);
    EXPECT_EQ(stage1_in_group.unsharded_gradients, psi);
    EXPECT_EQ(stage1_in_group.held, psi + psi + psi / 4 + 2 * psi / 4);
    EXPECT_EQ(model_state_after(rank, 2, stage1).held, psi + 3 * psi / 4);
    const ModelState stage2_in_group = model_state_after(rank, 3, stage2);
    EXPECT_EQ(stage2_in_group.unsharded_gradients, 0);
    EXPECT_EQ(stage2_in_group.held, psi + 3 * psi / 4);
  });
}

}  // namespace

namespace {

// The per-step buffers (gathered parameters, the collectives' blocks, the
// sharded gradients) come back to the wrapper's pool: once the first steps
// have run, a step allocates none.
TEST(ShardedMemory, AfterTheFirstStepsAStepAllocatesNoBuffers) {
  using engine::model::ShardingStrategy;
  harness::run_ranks(4, [](int rank) {
    const nets::NetSpec spec = divisible_net();
    std::vector<std::shared_ptr<engine::model::MMFullyShardedDataParallel>> wrappers = {
        fsdp(ShardingStrategy::kFullShard, nets::make_net(spec)),
        fsdp(ShardingStrategy::kShardGradOp, nets::make_net(spec)),
        fsdp(ShardingStrategy::kNoShard, nets::make_net(spec)), zero(1, nets::make_net(spec)),
        zero(2, nets::make_net(spec))};
    for (auto& wrapper : wrappers) {
      engine::optim::OptimWrapper optim(std::make_shared<torch::optim::Adam>(
          wrapper->parameters(), torch::optim::AdamOptions(0.01)));
      auto step = [&](int k) {
        wrapper->train_step(nets::make_batch(spec, 2, rank * 10 + k, {true}), optim);
      };
      step(0);
      step(1);
      const auto warm = wrapper->buffer_pool_stats();
      EXPECT_GT(warm.allocated, 0);
      for (int k = 2; k < 5; ++k) step(k);
      const auto after = wrapper->buffer_pool_stats();
      EXPECT_EQ(after.allocated, warm.allocated);
      EXPECT_GT(after.reused, warm.reused);
      EXPECT_EQ(wrapper->memory().kept_for_reuse, after.kept);
    }
  });
}

}  // namespace
