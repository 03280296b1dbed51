// N ranks with batch b each under MMDistributedDataParallel (on the world or
// a subgroup) end every step with the parameters one process reaches on the
// concatenated batch of N*b: random cases, and a covering grid of the
// options.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <iostream>
#include <optional>
#include <string>

#include "testing/harness.h"
#include "testing/model/ddp_cases.h"
#include "testing/model/nets.h"
#include "testing/pairwise.h"
#include "testing/property.h"

namespace {

using ddp_cases::Snapshots;
using ddp_cases::TrainingCase;

std::optional<std::string> ddp_problem_of(const TrainingCase& c) {
  auto initial = ddp_cases::initial_net(c);
  const Snapshots expected = ddp_cases::train_serial(c, *initial);
  auto per_rank = harness::collect_ranks<Snapshots>(
      c.world_size, [&](int rank) { return ddp_cases::train_rank(c, *initial, rank); },
      harness::test_options(c.seed));
  const int first = c.members.front();
  if (auto problem = ddp_cases::first_departure(
          expected, per_rank[first], "rank " + std::to_string(first) + " against the serial run")) {
    return problem;
  }
  for (const int r : c.members) {
    if (auto problem = ddp_cases::first_difference(per_rank[first], first, per_rank[r], r)) {
      return problem;
    }
  }
  return std::nullopt;
}

HARNESS_PROP(DdpEquivalence, RanksMatchOneProcessOnTheConcatenatedBatch, ()) {
  if (auto problem = ddp_problem_of(*ddp_cases::training_case())) RC_FAIL(*problem);
}

// Every pair of option values at least once (and every group size with
// every clipping mode and find_unused_parameters), random draws for the
// rest: see the sharded suite's grid.
TEST(DdpEquivalence, EveryPairOfOptionValuesRunsAtLeastOnce) {
  const int max_world_size = harness::max_world_size(8);
  const auto grid = ddp_cases::ddp_grid(max_world_size);
  std::cout << "covering grid: " << grid.summary() << "\n";
  const auto problem = pairwise::first_failing_row<TrainingCase>(
      grid,
      [&](const pairwise::Row& row) { return ddp_cases::training_case(grid, row, max_world_size); },
      ddp_problem_of);
  if (problem) FAIL() << *problem;
}

}  // namespace
