// broadcast, all_gather, gather, scatter, all_to_all and send/recv: every
// rank ends with exactly the bytes the serial picture says.
#include <ATen/ATen.h>
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

template <typename R>
std::vector<R> run_case(const TensorCase& c, const std::function<R(int)>& body) {
  return harness::collect_ranks<R>(c.world_size, body, harness::test_options(c.sim_seed));
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
  const auto results = run_case<at::Tensor>(c, [&](int rank) {
    at::Tensor t = cases::laid_out(table[rank][0], c.contiguous);
    const at::Tensor handle = t;
    dist::broadcast(t, c.root);
    if (!t.is_same(handle)) throw std::logic_error("broadcast replaced the caller's tensor");
    return t;
  });
  for (const auto& t : results) RC_ASSERT(cases::bit_equal(t, table[c.root][0]));
}

HARNESS_PROP(AllGather, EveryRankGetsEveryInputInRankOrder, ()) {
  const TensorCase c = *cases::tensor_case({});
  const Lists table = table_of(c);
  const auto results = run_case<std::vector<at::Tensor>>(
      c, [&](int rank) { return dist::all_gather(cases::laid_out(table[rank][0], c.contiguous)); });
  std::vector<at::Tensor> expected;
  for (int r = 0; r < c.world_size; ++r) expected.push_back(table[r][0]);
  for (const auto& list : results) RC_ASSERT(lists_equal(list, expected));
}

HARNESS_PROP(AllGatherIntoTensor, FillsTheCallersTensorInRankOrder, ()) {
  const TensorCase c = *cases::tensor_case({});
  const Lists table = table_of(c);
  const auto results = run_case<at::Tensor>(c, [&](int rank) {
    const at::Tensor input = cases::laid_out(table[rank][0], c.contiguous);
    std::vector<int64_t> sizes{c.world_size};
    sizes.insert(sizes.end(), c.shape.begin(), c.shape.end());
    at::Tensor output = at::empty(sizes, input.options());
    const void* storage = output.data_ptr();
    dist::all_gather_into_tensor(output, input);
    if (output.data_ptr() != storage) throw std::logic_error("the output was replaced");
    return output;
  });
  std::vector<at::Tensor> expected;
  for (int r = 0; r < c.world_size; ++r) expected.push_back(table[r][0]);
  for (const auto& output : results) RC_ASSERT(lists_equal(output.unbind(0), expected));
}

HARNESS_PROP(Gather, RootGetsEveryInputOthersGetNothing, ()) {
  const TensorCase c = *cases::tensor_case({});
  const Lists table = table_of(c);
  const auto results = run_case<std::vector<at::Tensor>>(c, [&](int rank) {
    return dist::gather(cases::laid_out(table[rank][0], c.contiguous), c.root);
  });
  std::vector<at::Tensor> expected;
  for (int r = 0; r < c.world_size; ++r) expected.push_back(table[r][0]);
  for (int r = 0; r < c.world_size; ++r) {
    RC_ASSERT(lists_equal(
        results[r], (r == c.root || c.world_size == 1) ? expected : std::vector<at::Tensor>{}));
  }
}

HARNESS_PROP(Scatter, RankKGetsTheRootsKthTensor, ()) {
  const TensorCase c = *cases::tensor_case({});
  const Lists table = table_of(c);
  const auto results = run_case<at::Tensor>(c, [&](int rank) {
    at::Tensor out = cases::laid_out(at::zeros(c.shape, at::TensorOptions(c.dtype)), c.contiguous);
    std::vector<at::Tensor> list;
    if (rank == c.root) {
      for (const auto& t : table[rank]) list.push_back(cases::laid_out(t, c.contiguous));
    }
    dist::scatter(out, list, c.root);
    return out;
  });
  for (int k = 0; k < c.world_size; ++k) RC_ASSERT(cases::bit_equal(results[k], table[c.root][k]));
}

HARNESS_PROP(AllToAll, OutputSOfRankKIsInputKOfRankS, ()) {
  const TensorCase c = *cases::tensor_case({});
  const Lists table = table_of(c);
  const auto results = run_case<std::vector<at::Tensor>>(c, [&](int rank) {
    std::vector<at::Tensor> inputs;
    std::vector<at::Tensor> outputs;
    for (int k = 0; k < c.world_size; ++k) {
      inputs.push_back(cases::laid_out(table[rank][k], c.contiguous));
      outputs.push_back(
          cases::laid_out(at::zeros(c.shape, at::TensorOptions(c.dtype)), c.contiguous));
    }
    dist::all_to_all(outputs, inputs);
    return outputs;
  });
  for (int k = 0; k < c.world_size; ++k) {
    for (int s = 0; s < c.world_size; ++s) RC_ASSERT(cases::bit_equal(results[k][s], table[s][k]));
  }
}

HARNESS_PROP(SendRecv, RingShiftDeliversEveryTensorToItsNeighbour, ()) {
  TensorCase c = *cases::tensor_case({});
  c.world_size = std::max(c.world_size, 2);
  const Lists table = table_of(c);
  const int tag = *rc::gen::inRange(0, 100);
  const int n = c.world_size;
  const auto results = run_case<at::Tensor>(c, [&](int rank) {
    // Post the send first, then receive: the pattern real backends allow.
    dist::WorkPtr sent =
        dist::send_async(cases::laid_out(table[rank][0], c.contiguous), (rank + 1) % n, tag);
    at::Tensor in = cases::laid_out(at::zeros(c.shape, at::TensorOptions(c.dtype)), c.contiguous);
    dist::recv(in, (rank + n - 1) % n, tag);
    sent->wait();
    return in;
  });
  for (int r = 0; r < n; ++r) RC_ASSERT(cases::bit_equal(results[r], table[(r + n - 1) % n][0]));
}
