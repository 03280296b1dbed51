// N ranks with batch b each under MMFullyShardedDataParallel, under every
// sharding strategy, wrap policy, optimizer, accumulation and clipping, end
// every step with the parameters and the grad_norm one process reaches on
// the concatenated batch of N*b, bit-identical on every rank.
#include <gtest/gtest.h>
#include <rapidcheck.h>

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
