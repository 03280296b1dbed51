#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

// The simulated backend: N ranks as threads of one process.
namespace sim {

struct WorldOptions {
  // Drives everything random in a run (today: arrival jitter). Printed in
  // every error the simulator raises, so that a failing run can be replayed.
  uint64_t seed = 0;
  // A rank that waits longer than this for others gets a Timeout naming them.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // Before each call a rank sleeps a random time up to this, drawn from the
  // seed, so that arrival orders vary and ordering bugs show. 0: no jitter.
  std::chrono::microseconds max_jitter{0};
  // Before a rank blocks it yields its core up to this many times, checking
  // in between whether it may go on: a peer that still has to arrive gets the
  // core at once, and short waits skip the costly sleep/wake-up. Bounded, so
  // it never spins; 0 blocks at once.
  int yields_before_blocking = 64;
};

// Runs one body on `world_size` thread-ranks. Each thread gets its own
// engine::dist context (default group = the whole world, backend name "sim"),
// so the engine::dist API works unchanged inside the body. Two Worlds, one
// after the other or side by side, share nothing.
class World {
 public:
  explicit World(int world_size, WorldOptions options = {});

  // Calls body(rank) on every rank and returns when all have finished. If any
  // rank threw, every rank still finishes (the others fail fast with
  // PeerFailure), then the first failure is rethrown: the root cause.
  void run(const std::function<void(int rank)>& body);

  int size() const { return size_; }
  const WorldOptions& options() const { return options_; }

 private:
  int size_;
  WorldOptions options_;
};

}  // namespace sim
