#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/fault_plan.h"

// The simulated backend: N ranks as threads of one process.
namespace sim {

struct WorldOptions {
  // Drives everything random in a run (arrival jitter). Printed in
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
  // Faults injected where ranks call the backend (see FaultPlan); printed in
  // every simulator message.
  FaultPlan faults;
  // Timeouts and injected delays run on a virtual clock that jumps to the
  // next deadline whenever no rank can go on (every rank waits in a call or
  // an injected delay, or has finished): a 60 s timeout takes no wall time.
  // Time in the ranks' own code does not count, so absences must come from
  // the fault plan. `timeout` of wall-clock time still bounds every wait.
  bool virtual_time = false;
  // Deterministic scheduling (implies virtual_time): one rank runs at a
  // time, and at each call, wait and exit the seed decides who runs next
  // (Schedule: PCT priorities), so a seed replays the same interleaving and
  // the same event trace (Outcome::trace); different seeds try different
  // arrival and departure orders. No jitter, no yielding.
  bool deterministic = false;
  // Lets the ranks' groups place buffers in node-shared memory
  // (engine/dist/node_shared.h), whose all_reduce the simulator does not see
  // (no checks, no faults, no virtual time; `timeout` bounds its waits). Off:
  // every collective goes through the simulator.
  bool node_shared_buffers = false;
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

  struct Outcome {
    std::vector<std::exception_ptr> errors;  // per rank; nullptr where the body returned
    std::exception_ptr root_cause;           // the first failure, what run() rethrows
    std::vector<std::string> trace;          // deterministic runs: who ran what, in order
  };
  // Like run(), but returns every rank's error instead of rethrowing.
  Outcome run_all(const std::function<void(int rank)>& body);

  int size() const { return size_; }
  const WorldOptions& options() const { return options_; }

 private:
  int size_;
  WorldOptions options_;
};

// Runs `body` twice with `options` (made deterministic) and compares the
// event traces: nullopt when they are equal, else where they first diverge,
// with both events. A difference means the body depends on something the
// seed does not fix (wall time, addresses, unseeded randomness).
std::optional<std::string> determinism_violation(int world_size, WorldOptions options,
                                                 const std::function<void(int rank)>& body);

// "ok" for nullptr, else the error's type: "Timeout", "PeerFailure",
// "CollectiveMismatch", "InvalidArgument", "MalformedInput", "DistError",
// "InjectedCrash", "InjectedHang" or "other".
const char* error_kind(const std::exception_ptr& error);
// The error's message ("" for nullptr).
std::string error_message(const std::exception_ptr& error);

}  // namespace sim
