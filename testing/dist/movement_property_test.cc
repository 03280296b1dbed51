// broadcast, all_gather, gather, scatter, all_to_all and send/recv: every
// rank ends with exactly the bytes the serial picture says.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include "engine/dist/dist.h"
#include "testing/cases.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace dist = engine::dist;
using cases::TensorCase;

namespace {

using Lists = std::vector<std::vector<at::Tensor>>;

// table[r][k]: rank r's k-th tensor.
Lists table_of(const TensorCase& c) {
  Lists table(c.world_size);
  for (int r = 0; r < c.world_size; ++r) {
    for (int k = 0; k < c.world_size; ++k) table[r].push_back(cases::input_for(c, r, k));
  }
  return table;
}

// Runs `body` on the members of the case's group (every rank of the world
// makes the group); the other ranks return `idle`.
template <typename R>
std::vector<R> run_on_group(const TensorCase& c, R idle,
                            const std::function<R(int rank, const dist::GroupPtr&)>& body) {
  return harness::collect_ranks<R>(
      c.world_size,
      [&](int rank) {
        const dist::GroupPtr group = cases::group_of(c);
        return cases::is_member(c, rank) ? body(rank, group) : idle;
      },
      harness::test_options(c.sim_seed));
}

// What a rank outside the group returns: defined, so that it travels
// between processes.
at::Tensor idle() { return at::zeros({0}); }

// The members' first tensors, in group-rank order.
std::vector<at::Tensor> firsts_of_members(const TensorCase& c, const Lists& table) {
  std::vector<at::Tensor> out;
  for (const int m : c.members) out.push_back(table[m][0]);
  return out;
}

bool lists_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!cases::bit_equal(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace

HARNESS_PROP(Broadcast, EveryRankGetsTheRootsBytesInPlace, ()) {
  const TensorCase c = *cases::tensor_case({});
  const Lists table = table_of(c);
  const int root = cases::global_root(c);
  const auto results =
      run_on_group<at::Tensor>(c, idle(), [&](int rank, const dist::GroupPtr& group) {
        at::Tensor t = cases::laid_out(table[rank][0], c.contiguous);
        const at::Tensor handle = t;
        dist::broadcast(t, root, group);
        if (!t.is_same(handle)) throw std::logic_error("broadcast replaced the caller's tensor");
        return t;
      });
  for (const int m : c.members) RC_ASSERT(cases::bit_equal(results[m], table[root][0]));
}

HARNESS_PROP(AllGather, EveryRankGetsEveryInputInRankOrder, ()) {
  const TensorCase c = *cases::tensor_case({});
  const Lists table = table_of(c);
  const auto results =
      run_on_group<std::vector<at::Tensor>>(c, {}, [&](int rank, const dist::GroupPtr& group) {
        return dist::all_gather(cases::laid_out(table[rank][0], c.contiguous), group);
      });
  for (const int m : c.members) RC_ASSERT(lists_equal(results[m], firsts_of_members(c, table)));
}

HARNESS_PROP(AllGatherIntoTensor, FillsTheCallersTensorInRankOrder, ()) {
  const TensorCase c = *cases::tensor_case({});
  const Lists table = table_of(c);
  const auto results =
      run_on_group<at::Tensor>(c, idle(), [&](int rank, const dist::GroupPtr& group) {
        const at::Tensor input = cases::laid_out(table[rank][0], c.contiguous);
        std::vector<int64_t> sizes{group_size(c)};
        sizes.insert(sizes.end(), c.shape.begin(), c.shape.end());
        at::Tensor output = at::empty(sizes, input.options());
        const void* storage = output.data_ptr();
        dist::all_gather_into_tensor(output, input, group);
        if (output.data_ptr() != storage) throw std::logic_error("the output was replaced");
        return output;
      });
  for (const int m : c.members) {
    RC_ASSERT(lists_equal(results[m].unbind(0), firsts_of_members(c, table)));
  }
}

HARNESS_PROP(Gather, RootGetsEveryInputOthersGetNothing, ()) {
  const TensorCase c = *cases::tensor_case({});
  const Lists table = table_of(c);
  const int root = cases::global_root(c);
  const auto results =
      run_on_group<std::vector<at::Tensor>>(c, {}, [&](int rank, const dist::GroupPtr& group) {
        return dist::gather(cases::laid_out(table[rank][0], c.contiguous), root, group);
      });
  for (const int m : c.members) {
    RC_ASSERT(lists_equal(results[m], (m == root || group_size(c) == 1)
                                          ? firsts_of_members(c, table)
                                          : std::vector<at::Tensor>{}));
  }
}

HARNESS_PROP(Scatter, RankKGetsTheRootsKthTensor, ()) {
  const TensorCase c = *cases::tensor_case({});
  const Lists table = table_of(c);
  const int root = cases::global_root(c);
  const auto results =
      run_on_group<at::Tensor>(c, idle(), [&](int rank, const dist::GroupPtr& group) {
        at::Tensor out =
            cases::laid_out(at::zeros(c.shape, at::TensorOptions(c.dtype)), c.contiguous);
        std::vector<at::Tensor> list;
        for (int k = 0; rank == root && k < group_size(c); ++k) {
          list.push_back(cases::laid_out(table[rank][k], c.contiguous));
        }
        dist::scatter(out, list, root, group);
        return out;
      });
  for (int k = 0; k < group_size(c); ++k) {
    RC_ASSERT(cases::bit_equal(results[c.members[k]], table[root][k]));
  }
}

HARNESS_PROP(AllToAll, OutputSOfRankKIsInputKOfRankS, ()) {
  const TensorCase c = *cases::tensor_case({});
  const Lists table = table_of(c);
  const auto results =
      run_on_group<std::vector<at::Tensor>>(c, {}, [&](int rank, const dist::GroupPtr& group) {
        std::vector<at::Tensor> inputs;
        std::vector<at::Tensor> outputs;
        for (int k = 0; k < group_size(c); ++k) {
          inputs.push_back(cases::laid_out(table[rank][k], c.contiguous));
          outputs.push_back(
              cases::laid_out(at::zeros(c.shape, at::TensorOptions(c.dtype)), c.contiguous));
        }
        dist::all_to_all(outputs, inputs, group);
        return outputs;
      });
  for (int k = 0; k < group_size(c); ++k) {
    for (int s = 0; s < group_size(c); ++s) {
      RC_ASSERT(cases::bit_equal(results[c.members[k]][s], table[c.members[s]][k]));
    }
  }
}

// A ring over the group's members, by their global ranks.
HARNESS_PROP(SendRecv, RingShiftDeliversEveryTensorToItsNeighbour, ()) {
  TensorCase c = *cases::tensor_case({});
  c.world_size = std::max(c.world_size, 2);
  if (c.members.size() < 2) {
    c.members.clear();
    for (int r = 0; r < c.world_size; ++r) c.members.push_back(r);
  }
  const Lists table = table_of(c);
  const int tag = *rc::gen::inRange(0, 100);
  const int n = group_size(c);
  const auto next = [&](int k) { return c.members[(k + 1) % n]; };
  const auto previous = [&](int k) { return c.members[(k + n - 1) % n]; };
  const auto results =
      run_on_group<at::Tensor>(c, idle(), [&](int rank, const dist::GroupPtr& group) {
        const int k = group ? group->rank() : rank;
        // Post the send first, then receive: the pattern real backends allow.
        dist::WorkPtr sent =
            dist::send_async(cases::laid_out(table[rank][0], c.contiguous), next(k), tag, group);
        at::Tensor in =
            cases::laid_out(at::zeros(c.shape, at::TensorOptions(c.dtype)), c.contiguous);
        dist::recv(in, previous(k), tag, group);
        sent->wait();
        return in;
      });
  for (int k = 0; k < n; ++k) {
    RC_ASSERT(cases::bit_equal(results[c.members[k]], table[previous(k)][0]));
  }
}

// Two sends to the same rank under different tags, received in the other
// order: each recv gets the send of its own tag. nccl has no tags (Backend's
// contract), so there the first recv gets the first send, whatever its tag.
HARNESS_PROP(SendRecv, ARecvMatchesTheSendOfItsTagNotTheFirstOne, ()) {
  TensorCase c = *cases::tensor_case({});
  c.world_size = std::max(c.world_size, 2);
  c.members.clear();
  for (int r = 0; r < c.world_size; ++r) c.members.push_back(r);
  const Lists table = table_of(c);
  const int first_tag = *rc::gen::inRange(0, 100);
  const int second_tag = first_tag + *rc::gen::inRange(1, 100);
  const bool tags_match = harness::backend() != "nccl";
  const int n = c.world_size;
  const auto results =
      run_on_group<std::vector<at::Tensor>>(c, {}, [&](int rank, const dist::GroupPtr&) {
        const int next = (rank + 1) % n;
        const int previous = (rank + n - 1) % n;
        dist::WorkPtr first =
            dist::send_async(cases::laid_out(table[rank][0], c.contiguous), next, first_tag);
        dist::WorkPtr second =
            dist::send_async(cases::laid_out(table[rank][1], c.contiguous), next, second_tag);
        const at::Tensor zeros = at::zeros(c.shape, at::TensorOptions(c.dtype));
        std::vector<at::Tensor> in{cases::laid_out(zeros, c.contiguous),
                                   cases::laid_out(zeros, c.contiguous)};
        dist::recv(in[1], previous, second_tag);
        dist::recv(in[0], previous, first_tag);
        first->wait();
        second->wait();
        return in;
      });
  for (int r = 0; r < n; ++r) {
    const int previous = (r + n - 1) % n;
    const auto& got = results[r];
    RC_ASSERT(cases::bit_equal(got[1], table[previous][tags_match ? 1 : 0]));
    RC_ASSERT(cases::bit_equal(got[0], table[previous][tags_match ? 0 : 1]));
  }
}
