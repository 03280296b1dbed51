#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <sstream>
#include <string>

#include "testing/repro.h"

// RC_GTEST_PROP with a reproduction command: a failing property hands its
// RapidCheck reproduce value to repro::PrintReproduction (testing:test_main),
// which prints one command rerunning this test on this case.
#define HARNESS_PROP(TestSuite, Name, ArgList)                                          \
  void harnessProp_##TestSuite##_##Name ArgList;                                        \
                                                                                        \
  TEST(TestSuite, Name) { ::repro::check_property(&harnessProp_##TestSuite##_##Name); } \
                                                                                        \
  void harnessProp_##TestSuite##_##Name ArgList

namespace repro {

struct PropertyOutcome {
  bool passed = false;
  std::string message;           // RapidCheck's report
  std::string replay_rc_params;  // RC_PARAMS that replay the failing case
};

// Runs a RapidCheck property as RapidCheck's own integrations do (its
// metadata `id` keys the reproduce value).
template <typename Testable>
PropertyOutcome run_property(Testable&& testable, const std::string& id,
                             const std::string& description) {
  rc::detail::TestMetadata metadata;
  metadata.id = id;
  metadata.description = description;
  const auto result = rc::detail::checkTestable(std::forward<Testable>(testable), metadata);
  PropertyOutcome outcome;
  outcome.passed = result.template is<rc::detail::SuccessResult>();
  rc::detail::FailureResult failure;
  if (result.match(failure)) {
    rc::detail::Configuration replay = rc::detail::configuration();
    replay.reproduce = {{id, failure.reproduce}};
    outcome.replay_rc_params = rc::detail::configToMinimalString(replay);
  }
  std::ostringstream message;
  rc::detail::printResultMessage(result, message);
  outcome.message = message.str();
  return outcome;
}

// RapidCheck's gtest check (rapidcheck/gtest.h), plus the reproduce value.
template <typename Testable>
void check_property(Testable&& testable) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const auto outcome =
      run_property(std::forward<Testable>(testable),
                   std::string(test->test_suite_name()) + "/" + test->name(), test->name());
  if (!outcome.replay_rc_params.empty()) note_failing_case(outcome.replay_rc_params);
  if (!outcome.passed) FAIL() << outcome.message;
}

}  // namespace repro
