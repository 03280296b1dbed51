// N ranks with batch b each under MMDistributedDataParallel (on the world or
// a subgroup) end every step with the parameters one process reaches on the
// concatenated batch of N*b.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "testing/harness.h"
#include "testing/model/ddp_cases.h"
#include "testing/model/nets.h"
#include "testing/property.h"

namespace {

using ddp_cases::Snapshots;
using ddp_cases::TrainingCase;

HARNESS_PROP(DdpEquivalence, RanksMatchOneProcessOnTheConcatenatedBatch, ()) {
  const TrainingCase c = *ddp_cases::training_case();
  auto initial = ddp_cases::initial_net(c);
  const Snapshots expected = ddp_cases::train_serial(c, *initial);
  auto per_rank = harness::collect_ranks<Snapshots>(
      c.world_size, [&](int rank) { return ddp_cases::train_rank(c, *initial, rank); },
      harness::test_options(c.seed));
  const int first = c.members.front();
  if (auto problem = ddp_cases::first_departure(
          expected, per_rank[first], "rank " + std::to_string(first) + " against the serial run")) {
    RC_FAIL(*problem);
  }
  for (const int r : c.members) {
    if (auto problem = ddp_cases::first_difference(per_rank[first], first, per_rank[r], r)) {
      RC_FAIL(*problem);
    }
  }
}

}  // namespace
