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

// RapidCheck's own gtest check (rapidcheck/gtest.h), plus the reproduce value.
template <typename Testable>
void check_property(Testable&& testable) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(test->test_suite_name()) + "/" + test->name();
  metadata.description = test->name();
  const auto result = rc::detail::checkTestable(std::forward<Testable>(testable), metadata);
  rc::detail::FailureResult failure;
  if (result.match(failure)) {
    rc::detail::Configuration replay = rc::detail::configuration();
    replay.reproduce = {{metadata.id, failure.reproduce}};
    note_failing_case(rc::detail::configToMinimalString(replay));
  }
  if (!result.template is<rc::detail::SuccessResult>()) {
    std::ostringstream message;
    rc::detail::printResultMessage(result, message);
    FAIL() << message.str();
  }
}

}  // namespace repro
