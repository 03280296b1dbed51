// Every collective as testing/collective_calls.h describes it, on any group:
// every member ends with exactly what the serial picture says, and the
// members agree bit for bit.
#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/dist/dist.h"
#include "testing/cases.h"
#include "testing/collective_calls.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace {

namespace dist = engine::dist;
using cases::TensorCase;
using collective_calls::Collective;

// Group rank r's k-th input: the case's input of r's world rank, salted by k.
collective_calls::Inputs inputs_of(const TensorCase& c) {
  return [c](int group_rank, int k) { return cases::input_for(c, c.members.at(group_rank), k); };
}

// Every collective made in turn on the case's group; each member returns
// every result, in order, and the ranks outside return none.
std::vector<std::vector<at::Tensor>> run_every_collective(const TensorCase& c) {
  const collective_calls::Inputs inputs = inputs_of(c);
  const int n = cases::group_size(c);
  return harness::collect_ranks<std::vector<at::Tensor>>(
      c.world_size,
      [&](int rank) {
        const dist::GroupPtr group = cases::group_of(c);
        std::vector<at::Tensor> results;
        const int me = cases::seat_of(c.members, rank);
        if (me < 0) return results;
        for (const Collective& collective : collective_calls::all_collectives()) {
          collective_calls::Buffers buffers = collective.prepare(inputs, me, n, c.root);
          collective.start(buffers, c.root, group)->wait();
          for (const auto& t : collective.results(buffers)) results.push_back(t);
        }
        return results;
      },
      harness::test_options(c.sim_seed));
}

}  // namespace

HARNESS_PROP(EveryCollective, GivesEveryMemberOfAnyGroupItsSerialResult, ()) {
  const TensorCase c = *cases::tensor_case({"sum"});
  const collective_calls::Inputs inputs = inputs_of(c);
  const int n = cases::group_size(c);
  const auto results = run_every_collective(c);
  for (int rank = 0; rank < c.world_size; ++rank) {
    const int me = cases::seat_of(c.members, rank);
    std::vector<at::Tensor> expected;
    if (me >= 0) {
      for (const Collective& collective : collective_calls::all_collectives()) {
        for (const auto& t : collective.expected(inputs, me, n, c.root)) expected.push_back(t);
      }
    }
    RC_ASSERT(results[rank].size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      RC_ASSERT(cases::bit_equal(results[rank][i], expected[i]));
    }
  }
}
