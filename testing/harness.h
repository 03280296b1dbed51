#pragma once

#include <functional>
#include <vector>

#include "sim/world.h"

// Runs one test body on every rank. Today the ranks are sim thread-ranks; the
// process backends run the same bodies in N processes.
namespace harness {

// Simulator options for tests: seed from SIM_SEED (default 1), a timeout of
// SIM_TIMEOUT_MS (default 20000) and a little arrival jitter.
sim::WorldOptions test_options();
// test_options() with `seed` (for cases drawn by RapidCheck).
sim::WorldOptions test_options(uint64_t seed);

void run_ranks(int world_size, const std::function<void(int rank)>& body,
               const sim::WorldOptions& options = test_options());

// Each rank's return value, indexed by rank.
template <typename R>
std::vector<R> collect_ranks(int world_size, const std::function<R(int rank)>& body,
                             const sim::WorldOptions& options = test_options()) {
  std::vector<R> results(world_size);
  run_ranks(
      world_size, [&](int rank) { results[rank] = body(rank); }, options);
  return results;
}

}  // namespace harness
