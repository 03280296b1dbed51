#include "engine/dist/reduce_op.h"

#include <gtest/gtest.h>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

TEST(ParseReduceOp, KnowsMmengineNamesInAnyCase) {
  EXPECT_EQ(parse_reduce_op("SUM", c10::kFloat, 0).op, ReduceOp::kSum);
  EXPECT_TRUE(parse_reduce_op("Mean", c10::kLong, 0).mean);
  EXPECT_EQ(parse_reduce_op("product", c10::kInt, 0).op, ReduceOp::kProduct);
  EXPECT_EQ(parse_reduce_op("bXor", c10::kBool, 0).op, ReduceOp::kBxor);
}

TEST(ParseReduceOp, UnknownNameListsTheKnownOnesAndTheRank) {
  try {
    parse_reduce_op("avg", c10::kFloat, 3);
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[rank 3] unknown reduce op 'avg'"), std::string::npos) << message;
    EXPECT_NE(message.find("sum, mean, product, min, max, band, bor, bxor"), std::string::npos);
  }
}

TEST(ParseReduceOp, MatchesWholeNamesOnly) {
  const std::string with_nul("min\0", 4);
  for (const std::string& near_miss :
       {std::string("su"), std::string("sums"), std::string(), std::string("max "), with_nul}) {
    EXPECT_THROW(parse_reduce_op(near_miss, c10::kFloat, 0), InvalidArgument) << near_miss;
  }
}

TEST(ReduceOpName, NamesEveryOpAsItParses) {
  for (const char* name : {"sum", "product", "min", "max", "band", "bor", "bxor"}) {
    EXPECT_STREQ(reduce_op_name(parse_reduce_op(name, c10::kInt, 0).op), name);
  }
}

TEST(ParseReduceOp, RejectsBitwiseOnFloatsAndMeanOnBool) {
  EXPECT_THROW(parse_reduce_op("band", c10::kBFloat16, 0), InvalidArgument);
  EXPECT_THROW(parse_reduce_op("mean", c10::kBool, 0), InvalidArgument);
  EXPECT_NO_THROW(parse_reduce_op("band", c10::kByte, 0));
}

}  // namespace
}  // namespace engine::dist
