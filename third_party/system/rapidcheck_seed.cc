// Every test binary linked with RapidCheck draws the same cases on every
// run: unless RC_PARAMS names a seed, the seed is one fixed per Bazel test
// target (a hash of TEST_TARGET), so a bug a case catches is caught on
// every run, and different targets still explore different cases. Exploring
// other seeds is explicit: RC_PARAMS='seed=N' (README, "Tests").
//
// RapidCheck reads RC_PARAMS once, on its first property, after static
// initialisation; setting it here, before main, is in time.
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

bool set_default_seed() {
  const char* given = std::getenv("RC_PARAMS");
  std::string params = given ? given : "";
  if (params.find("seed=") != std::string::npos) return false;
  const char* target = std::getenv("TEST_TARGET");
  const uint64_t seed = fnv1a(target ? target : "");
  params += (params.empty() ? "" : " ") + std::string("seed=") + std::to_string(seed);
  return setenv("RC_PARAMS", params.c_str(), /*overwrite=*/1) == 0;
}

const bool kSeedSet = set_default_seed();

}  // namespace
