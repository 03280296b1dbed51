#include "engine/dist/reduce_op.h"

#include <gtest/gtest.h>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

TEST(ParseReduceOp, KnowsMmengineNamesInAnyCase) {
  EXPECT_EQ(parse_reduce_op("SUM", c10::kFloat, 0, "all_reduce").op, ReduceOp::kSum);
  EXPECT_TRUE(parse_reduce_op("Mean", c10::kLong, 0, "all_reduce").mean);
  EXPECT_EQ(parse_reduce_op("product", c10::kInt, 0, "all_reduce").op, ReduceOp::kProduct);
  EXPECT_EQ(parse_reduce_op("bXor", c10::kBool, 0, "all_reduce").op, ReduceOp::kBxor);
}

TEST(ParseReduceOp, UnknownNameListsTheKnownOnesAndTheRank) {
  try {
    parse_reduce_op("avg", c10::kFloat, 3, "all_reduce");
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[rank 3] all_reduce: unknown reduce op 'avg'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("sum, mean, product, min, max, band, bor, bxor"), std::string::npos);
  }
}

TEST(ParseReduceOp, MatchesWholeNamesOnly) {
  const std::string with_nul("min\0", 4);
  for (const std::string& near_miss :
       {std::string("su"), std::string("sums"), std::string(), std::string("max "), with_nul}) {
    EXPECT_THROW(parse_reduce_op(near_miss, c10::kFloat, 0, "all_reduce"), InvalidArgument)
        << near_miss;
  }
}

TEST(ReduceOpName, NamesEveryOpAsItParses) {
  for (const char* name : {"sum", "product", "min", "max", "band", "bor", "bxor"}) {
    EXPECT_STREQ(reduce_op_name(parse_reduce_op(name, c10::kInt, 0, "all_reduce").op), name);
  }
}

TEST(ParseReduceOp, RejectsBitwiseOnFloatsAndMeanOnBool) {
  EXPECT_THROW(parse_reduce_op("band", c10::kBFloat16, 0, "all_reduce"), InvalidArgument);
  EXPECT_THROW(parse_reduce_op("mean", c10::kBool, 0, "all_reduce"), InvalidArgument);
  EXPECT_NO_THROW(parse_reduce_op("band", c10::kByte, 0, "all_reduce"));
}

TEST(ParseReduceOp, RejectsWhatNoBackendReducesNamingTheCall) {
  for (const char* op : {"sum", "max"}) {
    try {
      parse_reduce_op(op, c10::kComplexFloat, 1, "reduce_scatter");
      FAIL() << op;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("[rank 1] reduce_scatter: cannot reduce ComplexFloat"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace engine::dist
