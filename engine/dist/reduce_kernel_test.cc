#include "engine/dist/reduce_kernel.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/where.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <utility>
#include <vector>

namespace engine::dist {
namespace {

const std::vector<c10::ScalarType> kDtypes = {c10::kBool,  c10::kByte,  c10::kChar, c10::kShort,
                                              c10::kInt,   c10::kLong,  c10::kHalf, c10::kBFloat16,
                                              c10::kFloat, c10::kDouble};
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin,
                                    ReduceOp::kMax, ReduceOp::kBand,    ReduceOp::kBor,
                                    ReduceOp::kBxor};

// The integer type of a floating dtype's width, and its exponent's bits.
std::pair<c10::ScalarType, int64_t> exponent_of(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kHalf:
      return {c10::kShort, 0x7C00};
    case c10::kBFloat16:
      return {c10::kShort, 0x7F80};
    case c10::kFloat:
      return {c10::kInt, 0x7F800000};
    default:
      return {c10::kLong, 0x7FF0000000000000};
  }
}

// Any bits of `dtype`, except that a bool holds 0 or 1; a quarter of the
// floating values are NaNs with random payloads (or infinities), so that two
// NaNs meet often and the operands' order shows.
at::Tensor random_values(c10::ScalarType dtype, int64_t count, at::Generator& generator) {
  if (dtype == c10::kBool) return at::randint(0, 2, {count}, generator, at::kBool);
  const int64_t bytes = count * static_cast<int64_t>(c10::elementSize(dtype));
  at::Tensor values = at::randint(0, 256, {bytes}, generator, at::kByte).view(dtype);
  if (!c10::isFloatingType(dtype)) return values;
  const auto [bits_type, exponent] = exponent_of(dtype);
  at::Tensor bits = values.view(bits_type);
  const at::Tensor special = at::randint(0, 4, {count}, generator, at::kLong).eq(0);
  bits.copy_(at::where(special, bits.bitwise_or(exponent), bits));
  return values;
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return at::equal(a.view(at::kByte), b.view(at::kByte));
}

// The three-operand form is the in-place one run on a copy of its left
// operand, bit for bit, for every dtype and op the kernel reduces, at every
// length (the vector loops' tails included), and reads its inputs only.
RC_GTEST_PROP(ReduceKernel, ReduceToIsReduceIntoACopyOfTheLeftOperand, ()) {
  const auto dtype = *rc::gen::elementOf(kDtypes);
  const auto op = *rc::gen::elementOf(kOps);
  RC_PRE(can_reduce(dtype, op));
  const auto count = *rc::gen::inRange<int64_t>(0, 200);
  at::Generator generator =
      at::make_generator<at::CPUGeneratorImpl>(*rc::gen::arbitrary<uint32_t>());
  const at::Tensor left = random_values(dtype, count, generator);
  const at::Tensor right = random_values(dtype, count, generator);
  const at::Tensor left_before = left.clone();
  const at::Tensor right_before = right.clone();

  at::Tensor expected = left.clone();
  reduce_into(expected.data_ptr(), right.data_ptr(), count, dtype, op);
  at::Tensor out = at::empty_like(left);
  reduce_to(out.data_ptr(), left.data_ptr(), right.data_ptr(), count, dtype, op);

  RC_ASSERT(same_bits(out, expected));
  RC_ASSERT(same_bits(left, left_before));
  RC_ASSERT(same_bits(right, right_before));
}

}  // namespace
}  // namespace engine::dist
