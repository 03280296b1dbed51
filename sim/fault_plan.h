#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace sim {

// A fault injected where a rank calls the backend: at its `call`-th call
// (1-based, counted over all its groups, point-to-point calls included).
struct Fault {
  enum class Kind {
    kCrash,        // the rank dies there, as if its process was killed
    kDelay,        // the rank arrives `delay` late (a straggler)
    kNeverArrive,  // the rank stays alive but never makes the call (a hang)
    kGarble,       // every byte the rank sends in the call is random (a hostile peer)
  };
  Kind kind = Kind::kCrash;
  int rank = 0;
  uint64_t call = 1;
  std::chrono::milliseconds delay{0};

  bool operator==(const Fault& other) const;
};

// The faults of one run, as data. Written
// "crash:2@5,delay:1@3+200ms,never:0@7,garble:1@2" (kind:rank@call, a delay
// with +<ms>ms); the empty string is no fault.
struct FaultPlan {
  std::vector<Fault> faults;

  bool empty() const { return faults.empty(); }
  std::string to_string() const;
  // The fault planned for `rank`'s `call`-th call, or nullptr.
  const Fault* find(int rank, uint64_t call) const;
  // True when a rank dies or hangs, or sends garbage (the run cannot complete).
  bool stops_a_rank() const;

  // Throws std::invalid_argument naming the part that is wrong and the syntax.
  static FaultPlan parse(const std::string& text);
  // Swarm testing: the mix itself drawn from `seed`. Each kind is in the
  // plan or not, with one or two faults of it, at ranks below `world_size`
  // and calls up to `max_call`; delays up to `max_delay`.
  static FaultPlan swarm(uint64_t seed, int world_size, uint64_t max_call,
                         std::chrono::milliseconds max_delay);
};

// What a crashed rank throws from its call: not a DistError, so that code
// which handles collective errors does not handle it: like a killed process,
// the rank stops.
class InjectedCrash : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a rank that never arrived throws once every other rank has finished.
class InjectedHang : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace sim
