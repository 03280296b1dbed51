// N ranks with batch b each under MMFullyShardedDataParallel, under every
// sharding strategy, wrap policy, optimizer, accumulation and clipping, end
// every step with the parameters and the grad_norm one process reaches on
// the concatenated batch of N*b, bit-identical on every rank.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <torch/torch.h>

#include <algorithm>

#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
#include "testing/harness.h"
#include "testing/model/sharding_cases.h"
#include "testing/property.h"

namespace {

using sharding_cases::Run;
using sharding_cases::ShardingCase;

HARNESS_PROP(FsdpEquivalence, RanksMatchOneProcessOnTheConcatenatedBatch, ()) {
  const ShardingCase c = *sharding_cases::sharding_case();
  torch::manual_seed(c.seed);
  auto initial = nets::make_net(c.spec);
  const Run expected = sharding_cases::train_serial(c, *initial);
  auto per_rank = harness::collect_ranks<Run>(
      c.world_size, [&](int rank) { return sharding_cases::train_rank(c, *initial, rank); },
      harness::test_options(c.seed));
  if (auto problem = sharding_cases::first_problem(expected, per_rank)) RC_FAIL(*problem);
}

}  // namespace

namespace {

using engine::model::MMFullyShardedDataParallel;

// FULL_SHARD holds at most the root and two units gathered (here, after
// the first step has shown which layers run through call_unit), and each of
// 4 ranks holds a quarter of the parameters, plus padding.
TEST(FsdpMemory, GatheredPeakIsBoundedAndShardsAreAQuarter) {
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

}  // namespace
