#pragma once

#include <ATen/core/Tensor.h>
#include <rapidcheck.h>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "engine/dist/group.h"
#include "testing/pairwise.h"

// Property-test cases whose results are exact, their inputs, and the serial
// reference they are compared with.
namespace cases {

struct TensorCase {
  int world_size = 1;
  std::string op;  // reduce op name; "" for data-movement collectives
  c10::ScalarType dtype = c10::kFloat;
  std::vector<int64_t> shape;
  bool contiguous = true;
  // The group the call runs on: its global ranks, sorted. Every rank of the
  // world, or (in half the cases) any subset: a group of one, groups without
  // rank 0, ranks that are not contiguous.
  std::vector<int> members;
  int root = 0;            // a group rank
  uint64_t data_seed = 0;  // fills the inputs
  uint64_t sim_seed = 0;   // drives the simulator
};

// The case's group on every rank of the world (collective: every rank calls
// it): nullptr (the default group) when the members are the whole world.
engine::dist::GroupPtr group_of(const TensorCase& c);
engine::dist::GroupPtr group_of(int world_size, const std::vector<int>& members);
bool is_member(const TensorCase& c, int rank);
int group_size(const TensorCase& c);   // how many ranks the group has
int global_root(const TensorCase& c);  // the root's global rank

// How RapidCheck prints a case (in a failure's counterexample).
void showValue(const TensorCase& c, std::ostream& os);

// Every reduce op the suites cover, by name.
const std::vector<std::string>& all_ops();

// Every dtype the suites cover, and those that `op` accepts on the suites'
// backend (none for bxor on nccl, which lacks it).
std::vector<c10::ScalarType> all_dtypes();
std::vector<c10::ScalarType> dtypes_for(const std::string& op);

// Sorted global ranks of a group of at least `min_size` of `world_size`
// ranks, any shape: without rank 0, not contiguous, the whole world.
rc::Gen<std::vector<int>> subgroup(int world_size, size_t min_size);

// Any `count` ranks of a world of `world_size`, sorted: without rank 0,
// with gaps, or all of them.
rc::Gen<std::vector<int>> any_ranks(int world_size, int count);

// `rank`'s index among the sorted `members`, -1 when it is not one.
int seat_of(const std::vector<int>& members, int rank);

// Where a case's group sits, as the covering grids name it: "group_size"
// (1 to `largest_group`) and "ranks_outside" ("none": the group is the
// world; "some": a larger world around it, of up to `max_world_size`
// ranks, which placement_fits checks).
std::vector<pairwise::Factor> placement_factors(int largest_group);
bool placement_fits(const pairwise::Values& values, int max_world_size);
struct Placement {
  int world_size = 1;
  std::vector<int> members;
};
rc::Gen<Placement> placement(const pairwise::Values& values, int max_world_size);

// Every rank of a world of `world_size`: 0, 1, ..., world_size - 1.
std::vector<int> all_ranks(int world_size);

// The whole world, or in half the cases any subgroup of it (subgroup(.., 1)).
rc::Gen<std::vector<int>> world_or_subgroup(int world_size);

// A world split for a case on a group: every rank builds both groups
// (new_group is collective over the world). `members` is the case's group
// (nullptr for the whole world), `others` the group of the ranks outside it
// (nullptr when there are none).
struct Split {
  engine::dist::GroupPtr members;
  engine::dist::GroupPtr others;
};
Split split_world(int world_size, const std::vector<int>& members);

// What the ranks outside a case do meanwhile: collectives of their own on
// `others`, so that a call that strays from its group meets other traffic
// rather than silence. No-op on a member (and where `others` is nullptr).
void keep_busy(const engine::dist::GroupPtr& others);

// World sizes 1-8 (up to the processes in process mode), the group (the
// whole world, or in half the cases any subgroup) and a root in it; the
// other fields at their defaults.
rc::Gen<TensorCase> group_case();

// A group_case with shapes from empty to past the simulator's parallel-path
// threshold; contiguous or strided.
rc::Gen<TensorCase> tensor_case(const std::vector<std::string>& ops);

// Rank `rank`'s input: values small enough for every reduction over 8 ranks
// to be exact in every dtype (for example sums of integers in [-8, 8]).
at::Tensor input_for(const TensorCase& c, int rank, int salt = 0);

// Every rank's input_for(c, rank, salt), in world-rank order.
std::vector<at::Tensor> inputs_of_every_rank(const TensorCase& c, int salt = 0);

// `values` laid out as the case asks: contiguous, or a strided view; on the
// harness's device (a GPU when the process suites run on nccl).
at::Tensor laid_out(const at::Tensor& values, bool contiguous);

// The serial reduction of `inputs` in rank order, with `op`'s semantics
// (mean: sum, then division; integers truncated toward zero).
at::Tensor reduce_reference(const std::vector<at::Tensor>& inputs, const std::string& op);

// Same dtype, shape and bytes (so NaN equals NaN and -0 differs from 0), on
// any devices.
bool bit_equal(const at::Tensor& a, const at::Tensor& b);

// `count` float32 values of magnitudes from 1e-4 to 1e8, drawn for `rank`,
// whose sums change with the order they are added in.
at::Tensor order_sensitive_floats(int rank, int64_t count);

// inputs[0] + inputs[1] + ..., left to right (or right to left).
at::Tensor sum_in_order(const std::vector<at::Tensor>& inputs, bool reverse = false);

}  // namespace cases
