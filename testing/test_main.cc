// The main of the suites under testing/: gtest's, plus a reproduction
// command printed after each failed test (testing/repro.h), and one
// source's tests only where SUITE_SOURCE names it (testing/suite_source.h).
#include <gtest/gtest.h>

#include "testing/repro.h"
#include "testing/suite_source.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!suite_source::apply_from_environment()) return 1;
  ::testing::UnitTest::GetInstance()->listeners().Append(new repro::PrintReproduction);
  return RUN_ALL_TESTS();
}
