#include "testing/harness.h"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <string>

namespace harness {
namespace {

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value ? std::stoull(value) : fallback;
}

}  // namespace

sim::WorldOptions test_options(uint64_t seed) {
  sim::WorldOptions options;
  options.seed = seed;
  options.timeout = std::chrono::milliseconds(env_or("SIM_TIMEOUT_MS", 20000));
  options.max_jitter = std::chrono::microseconds(20);
  return options;
}

sim::WorldOptions test_options() { return test_options(env_or("SIM_SEED", 1)); }

void run_ranks(int world_size, const std::function<void(int rank)>& body,
               const sim::WorldOptions& options) {
  // Thread-ranks share the cores: ATen must not start a thread pool of its own.
  at::set_num_threads(1);
  sim::World(world_size, options).run(body);
}

}  // namespace harness
