#pragma once

#include <gtest/gtest.h>

#include <string>

// One command that reruns a failed test alone, with everything that decided
// its run: the Bazel target, the test filter, the simulator's seed
// (SIM_SEED) and, when a property generated the case, RapidCheck's
// reproduce value (RC_PARAMS). Under Bazel the target is TEST_TARGET.
namespace repro {

// "bazel test //testing/dist:simulator_tests --test_filter=Faults.X
// --test_env=SIM_SEED=1 [--test_env=RC_PARAMS='reproduce=...']" (no filter
// when `test_name` is empty: a binary that is one property).
std::string command_for(const std::string& test_name, const std::string& rc_params);

// Remembers the RC_PARAMS that replay the current test's failing case.
void note_failing_case(const std::string& rc_params);

// Prints "Reproduce with: <command>" after each failed test.
class PrintReproduction : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& test) override;
  void OnTestEnd(const ::testing::TestInfo& test) override;
};

}  // namespace repro
