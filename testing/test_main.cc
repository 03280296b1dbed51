// The main of the suites under testing/: gtest's, plus a reproduction
// command printed after each failed test (testing/repro.h).
#include <gtest/gtest.h>

#include "testing/repro.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new repro::PrintReproduction);
  return RUN_ALL_TESTS();
}
