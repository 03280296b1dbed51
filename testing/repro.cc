#include "testing/repro.h"

#include <cstdlib>
#include <iostream>

namespace repro {
namespace {

// Set by a property of the running test (tests run one at a time).
std::string failing_case_rc_params;

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

}  // namespace

std::string command_for(const std::string& test_name, const std::string& rc_params) {
  std::string command = "bazel test " + env_or("TEST_TARGET", "<this test's target>");
  if (!test_name.empty()) command += " --test_filter=" + test_name;
  command += " --test_env=SIM_SEED=" + env_or("SIM_SEED", "1");
  if (!rc_params.empty()) command += " --test_env=RC_PARAMS='" + rc_params + "'";
  return command;
}

void note_failing_case(const std::string& rc_params) { failing_case_rc_params = rc_params; }

void PrintReproduction::OnTestStart(const ::testing::TestInfo&) { failing_case_rc_params.clear(); }

void PrintReproduction::OnTestEnd(const ::testing::TestInfo& test) {
  if (!test.result()->Failed()) return;
  const std::string name = std::string(test.test_suite_name()) + "." + test.name();
  std::cout << "Reproduce with: " << command_for(name, failing_case_rc_params) << std::endl;
}

}  // namespace repro
