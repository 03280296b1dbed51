#include "testing/suite_source.h"

#include <gtest/gtest.h>

namespace {

using suite_source::DefinedTest;
using suite_source::filter_for;

const std::vector<DefinedTest> kTests = {
    {"testing/model/join_test.cc", "Join.UnevenBatches"},
    {"testing/model/join_test.cc", "Join.NodeSharedBuffers"},
    {"/src/testing/model/amp_test.cc", "AmpOverRanks.Overflow"},
    {"testing/model/pre_join_test.cc", "PreJoin.Other"},
};

TEST(FilterFor, PicksTheTestsOfOneSourceByItsName) {
  EXPECT_EQ(filter_for(kTests, "*", "join_test.cc"), "Join.UnevenBatches:Join.NodeSharedBuffers");
  EXPECT_EQ(filter_for(kTests, "*", "amp_test.cc"), "AmpOverRanks.Overflow");
}

TEST(FilterFor, PicksTheTestsOfSeveralSourcesAndRefusesAListWithAnUnknownOne) {
  EXPECT_EQ(filter_for(kTests, "*", "amp_test.cc,join_test.cc"),
            "AmpOverRanks.Overflow:Join.UnevenBatches:Join.NodeSharedBuffers");
  EXPECT_EQ(filter_for(kTests, "-*NodeShared*", "join_test.cc,amp_test.cc"),
            "Join.UnevenBatches:AmpOverRanks.Overflow");
  EXPECT_EQ(filter_for(kTests, "*", "join_test.cc,oin_test.cc"), std::nullopt);
}

TEST(FilterFor, MatchesAWholeFileNameOrTheEndOfAPathOnly) {
  EXPECT_EQ(filter_for(kTests, "*", "model/join_test.cc"),
            "Join.UnevenBatches:Join.NodeSharedBuffers");
  EXPECT_EQ(filter_for(kTests, "*", "oin_test.cc"), std::nullopt);
  EXPECT_EQ(filter_for(kTests, "*", "testing/model/pre_join_test.cc"), "PreJoin.Other");
}

TEST(FilterFor, KeepsWhatTheGivenFilterExcludesOut) {
  EXPECT_EQ(filter_for(kTests, "-*NodeShared*", "join_test.cc"), "Join.UnevenBatches");
  EXPECT_EQ(filter_for(kTests, "Join.Uneven*:Amp*", "join_test.cc"), "Join.UnevenBatches");
  EXPECT_EQ(filter_for(kTests, "Join.?neven*-*NodeShared*", "join_test.cc"), "Join.UnevenBatches");
}

TEST(FilterFor, RunsNothingWhenTheGivenFilterExcludesEveryTestOfTheSource) {
  EXPECT_EQ(filter_for(kTests, "Amp*", "join_test.cc"), "-*");
}

TEST(FilterFor, IsNulloptForASourceThatDefinesNoTest) {
  EXPECT_EQ(filter_for(kTests, "*", "no_such_test.cc"), std::nullopt);
  EXPECT_EQ(filter_for({}, "*", "join_test.cc"), std::nullopt);
}

}  // namespace
