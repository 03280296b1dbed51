#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/dist/dist.h"

// One description of each collective for the suites that run them all: the
// buffers a rank passes, the call, and what each rank of the group holds
// after it, computed serially from every rank's inputs. Reductions sum
// (the reduction suites cover the other ops). Used by the Work-kinds list
// (work_kinds.h), by the property that every collective gives every
// member of any group its serial result (testing/dist), and by the
// collectives benchmark (tools/bench/descriptor.h).
namespace collective_calls {

// Group rank `group_rank`'s `k`-th input (k is 0 for calls with one input,
// 0 to the group's size - 1 for lists): a new tensor at each call, since
// the calls write their buffers in place. The suite chooses the values;
// sums of them must be exact in their dtype.
using Inputs = std::function<at::Tensor(int group_rank, int k)>;

// What one rank passes to a call and reads back after it.
struct Buffers {
  at::Tensor tensor;  // reduced or moved in place, or the one input
  std::vector<at::Tensor> inputs;
  at::Tensor output;
  std::vector<at::Tensor> outputs;
};

// Where a call's data go with respect to its root.
enum class Root { kNone, kSends, kReceives };

struct Collective {
  std::string name;
  Root root = Root::kNone;
  // Group rank `me`'s buffers in a group of `n`; `root` is a group rank.
  std::function<Buffers(const Inputs& inputs, int me, int n, int root)> prepare;
  // Starts the call on `group`; `root` is a group rank.
  std::function<engine::dist::WorkPtr(Buffers& buffers, int root,
                                      const engine::dist::GroupPtr& group)>
      start;
  // What a rank holds once the call completed, and what group rank `me` of
  // `n` must hold, in the same order.
  std::function<std::vector<at::Tensor>(const Buffers& buffers)> results;
  std::function<std::vector<at::Tensor>(const Inputs& inputs, int me, int n, int root)> expected;
};

// Every collective of engine/dist: all_reduce, broadcast, reduce,
// all_gather (both forms), gather, scatter, reduce_scatter (both forms),
// all_to_all and barrier. Point-to-point calls are not collectives.
const std::vector<Collective>& all_collectives();

}  // namespace collective_calls
