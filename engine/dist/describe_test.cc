#include "engine/dist/describe.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

namespace engine::dist {
namespace {

TEST(Describe, RanksAreCompressedIntoRanges) {
  EXPECT_EQ(describe_ranks({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(describe_ranks({0, 2, 3, 4, 7}), "0, 2-4, 7");
  EXPECT_EQ(describe_ranks({}), "");
}

TEST(Describe, TensorsShowDtypeShapeAndDevice) {
  EXPECT_EQ(describe(at::zeros({2, 3}, at::kBFloat16)), "BFloat16[2, 3] cpu");
  EXPECT_EQ(describe(at::Tensor()), "undefined");
}

}  // namespace
}  // namespace engine::dist
