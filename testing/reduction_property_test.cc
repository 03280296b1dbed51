// all_reduce, reduce and reduce_scatter against a serial reference: exact
// results, bit-identical on every rank, in place on the caller's tensor.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/dist/dist.h"
#include "testing/cases.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace dist = engine::dist;
using cases::TensorCase;

namespace {

const std::vector<std::string> kOps = {"sum", "mean", "product", "min",
                                       "max", "band", "bor",     "bxor"};

std::vector<at::Tensor> inputs_of(const TensorCase& c, int salt = 0) {
  std::vector<at::Tensor> inputs;
  for (int r = 0; r < c.world_size; ++r) inputs.push_back(cases::input_for(c, r, salt));
  return inputs;
}

// A rank's tensor after the call, and whether it is still the caller's object
// with the caller's storage.
struct InPlace {
  at::Tensor tensor;
  bool same_object = false;
};

// How an InPlace travels between the processes of a process-mode run.
c10::IValue to_ivalue(const InPlace& result) {
  return c10::ivalue::Tuple::create({result.tensor, result.same_object});
}
void from_ivalue(const c10::IValue& value, InPlace& out) {
  const auto& fields = value.toTupleRef().elements();
  out = InPlace{fields[0].toTensor(), fields[1].toBool()};
}

template <typename Call>
std::vector<InPlace> run_in_place(const TensorCase& c, const std::vector<at::Tensor>& inputs,
                                  Call call) {
  return harness::collect_ranks<InPlace>(
      c.world_size,
      [&](int rank) {
        at::Tensor t = cases::laid_out(inputs[rank], c.contiguous);
        const at::Tensor handle = t;
        const void* storage = t.data_ptr();
        call(t, rank);
        return InPlace{t, t.is_same(handle) && t.data_ptr() == storage};
      },
      harness::test_options(c.sim_seed));
}

}  // namespace

HARNESS_PROP(AllReduce, EqualsSerialReferenceOnEveryRankInPlace, ()) {
  const TensorCase c = *cases::tensor_case(kOps);
  const auto inputs = inputs_of(c);
  const auto results =
      run_in_place(c, inputs, [&](at::Tensor& t, int) { dist::all_reduce(t, c.op); });
  const at::Tensor expected = cases::reduce_reference(inputs, c.op);
  for (const auto& r : results) {
    RC_ASSERT(r.same_object);
    RC_ASSERT(cases::bit_equal(r.tensor, expected));
  }
}

HARNESS_PROP(AllReduce, AsyncFormEqualsBlockingForm, ()) {
  const TensorCase c = *cases::tensor_case(kOps);
  const auto inputs = inputs_of(c);
  const auto results = run_in_place(c, inputs, [&](at::Tensor& t, int) {
    dist::WorkPtr work = dist::all_reduce_async(t, c.op);
    work->wait();
    if (!work->is_completed() || work->exception())
      throw std::logic_error("work not completed cleanly");
  });
  const at::Tensor expected = cases::reduce_reference(inputs, c.op);
  for (const auto& r : results) RC_ASSERT(cases::bit_equal(r.tensor, expected));
}

HARNESS_PROP(Reduce, RootGetsReferenceOthersUntouched, ()) {
  const TensorCase c = *cases::tensor_case(kOps);
  const auto inputs = inputs_of(c);
  const auto results =
      run_in_place(c, inputs, [&](at::Tensor& t, int) { dist::reduce(t, c.root, c.op); });
  const at::Tensor expected = cases::reduce_reference(inputs, c.op);
  for (int r = 0; r < c.world_size; ++r) {
    RC_ASSERT(results[r].same_object);
    RC_ASSERT(cases::bit_equal(results[r].tensor, r == c.root ? expected : inputs[r]));
  }
}

HARNESS_PROP(ReduceScatter, RankKGetsReferenceOfChunkK, ()) {
  const TensorCase c = *cases::tensor_case(kOps);
  // inputs[k][r]: rank r's contribution to rank k's output.
  std::vector<std::vector<at::Tensor>> inputs;
  for (int k = 0; k < c.world_size; ++k) inputs.push_back(inputs_of(c, /*salt=*/k + 1));
  const auto results = run_in_place(c, inputs[0], [&](at::Tensor& out, int rank) {
    std::vector<at::Tensor> mine;
    for (int k = 0; k < c.world_size; ++k)
      mine.push_back(cases::laid_out(inputs[k][rank], c.contiguous));
    dist::reduce_scatter(out, mine, c.op);
  });
  for (int k = 0; k < c.world_size; ++k) {
    RC_ASSERT(results[k].same_object);
    RC_ASSERT(cases::bit_equal(results[k].tensor, cases::reduce_reference(inputs[k], c.op)));
  }
}

TEST(AllReduce, OpNamesAreCaseInsensitive) {
  const auto results = harness::collect_ranks<at::Tensor>(2, [](int rank) {
    at::Tensor t = at::tensor({rank + 1, 10 * rank}, at::kLong);
    dist::all_reduce(t, "MaX");
    return t;
  });
  for (const auto& t : results) EXPECT_TRUE(t.equal(at::tensor({2, 10}, at::kLong)));
}

TEST(AllReduce, MeanOnIntegersTruncatesTowardZero) {
  // [1.5, -1.5] -> [1, -1], as mmengine on torch does.
  const auto results = harness::collect_ranks<at::Tensor>(2, [](int rank) {
    at::Tensor t = rank == 0 ? at::tensor({1, -1}, at::kLong) : at::tensor({2, -2}, at::kLong);
    dist::all_reduce(t, "mean");
    return t;
  });
  for (const auto& t : results) EXPECT_TRUE(t.equal(at::tensor({1, -1}, at::kLong)));
}
