#pragma once

#include <optional>
#include <string>
#include <vector>

// One source's tests out of a binary that several sources share. Suites that
// also run in processes, on hosts and on GPUs are compiled into their
// package's one test binary (one translation unit under --config=unity); a
// run picks its suites by source file, SUITE_SOURCE=join_test.cc or
// SUITE_SOURCE=join_test.cc,amp_test.cc, so that no list of test names can
// fall behind the sources. test_main applies it.
namespace suite_source {

struct DefinedTest {
  std::string file;  // where the test is defined: a path, relative or absolute
  std::string name;  // "Suite.Test"
};

// The gtest filter that runs the tests defined in `sources` (','-separated;
// each a file name, or the end of a path after a '/') that `filter` (gtest's
// syntax: ':'-separated patterns, negative ones after a '-') already selects;
// "-*" when it selects none of them. nullopt when no test of `tests` is
// defined in one of the sources.
std::optional<std::string> filter_for(const std::vector<DefinedTest>& tests,
                                      const std::string& filter, const std::string& sources);

// Narrows this binary's gtest filter to SUITE_SOURCE's tests, when it is
// set. False, with a message on stderr, when SUITE_SOURCE names a source
// that defines no test here.
bool apply_from_environment();

}  // namespace suite_source
