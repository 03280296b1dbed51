#include "testing/suite_source.h"

#include <fnmatch.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <sstream>

namespace suite_source {
namespace {

bool defined_in(const std::string& file, const std::string& source) {
  if (file == source) return true;
  return file.size() > source.size() && file.ends_with(source) &&
         file[file.size() - source.size() - 1] == '/';
}

// gtest's patterns: '*' and '?' wildcards, ':' between patterns.
bool matches_any(const std::string& patterns, const std::string& name) {
  std::istringstream list(patterns);
  std::string pattern;
  while (std::getline(list, pattern, ':')) {
    if (!pattern.empty() && fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

std::vector<DefinedTest> tests_of_this_binary() {
  std::vector<DefinedTest> tests;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const ::testing::TestInfo& test = *suite.GetTestInfo(t);
      tests.push_back({test.file(), std::string(suite.name()) + "." + test.name()});
    }
  }
  return tests;
}

}  // namespace

std::optional<std::string> filter_for(const std::vector<DefinedTest>& tests,
                                      const std::string& filter, const std::string& sources) {
  const auto dash = filter.find('-');
  std::string positive = filter.substr(0, dash);
  const std::string negative = dash == std::string::npos ? "" : filter.substr(dash + 1);
  if (positive.empty()) positive = "*";
  std::string chosen;
  std::istringstream list(sources);
  std::string source;
  while (std::getline(list, source, ',')) {
    bool defined = false;
    for (const DefinedTest& test : tests) {
      if (!defined_in(test.file, source)) continue;
      defined = true;
      if (!matches_any(positive, test.name) || matches_any(negative, test.name)) continue;
      chosen += (chosen.empty() ? "" : ":") + test.name;
    }
    if (!defined) return std::nullopt;
  }
  return chosen.empty() ? "-*" : chosen;
}

bool apply_from_environment() {
  const char* source = std::getenv("SUITE_SOURCE");
  if (source == nullptr || *source == '\0') return true;
  const std::optional<std::string> filter =
      filter_for(tests_of_this_binary(), GTEST_FLAG_GET(filter), source);
  if (!filter) {
    std::cerr << "SUITE_SOURCE=" << source
              << ": no test of this binary is defined in a source of one of those names; name "
                 "sources its BUILD target lists\n";
    return false;
  }
  GTEST_FLAG_SET(filter, *filter);
  return true;
}

}  // namespace suite_source
