// N ranks with batch b each under MMFullyShardedDataParallel (every
// sharding strategy and wrap policy) or MMZeroDataParallel (stage 1 and 2,
// bucket sizes, overlap_comm), under every optimizer, accumulation and
// clipping, with parameters used on some ranks only where the wrapper allows
// it, end every step with the parameters and the grad_norm one process
// reaches on the concatenated batch of N*b, bit-identical on every rank. The same
// binary runs in 2 and 4 processes on mpi and gloo (testing/process).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "testing/harness.h"
#include "testing/model/sharding_cases.h"
#include "testing/property.h"

namespace {

using sharding_cases::Run;
using sharding_cases::ShardingCase;

HARNESS_PROP(ShardedEquivalence, RanksMatchOneProcessOnTheConcatenatedBatch, ()) {
  const ShardingCase c = *sharding_cases::sharding_case(harness::max_world_size(8));
  torch::manual_seed(c.seed);
  auto initial = nets::make_net(c.spec);
  const Run expected = sharding_cases::train_serial(c, *initial);
  auto per_rank = harness::collect_ranks<Run>(
      c.world_size, [&](int rank) { return sharding_cases::train_rank(c, *initial, rank); },
      harness::test_options(c.seed));
  if (auto problem = sharding_cases::first_problem(c, expected, per_rank)) RC_FAIL(*problem);
}

}  // namespace
