// A suite that fails on purpose, for repro_test.sh: a property whose case
// RapidCheck generates, and a plain test whose outcome SIM_SEED decides.
#include <cstdlib>
#include <string>

#include "testing/property.h"

// The counterexample does not shrink: only the reproduce value (not a fresh
// seed) finds the same one again.
HARNESS_PROP(Planted, NoMultipleOfSeven, ()) {
  const auto value = *rc::gen::noShrink(rc::gen::inRange<uint32_t>(1, 1000000000));
  RC_ASSERT(value % 7 != 0);
}

TEST(Planted, SeedSeven) {
  const char* seed = std::getenv("SIM_SEED");
  EXPECT_NE(std::string(seed ? seed : "1"), "7");
}
