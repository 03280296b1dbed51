#pragma once

#include <optional>
#include <string>

// Planted desyncs for the flight-recorder diagnosis, run alike on the
// simulator and in real processes.
namespace desync_cases {

enum class Desync {
  kSkip,           // the odd rank skips the broadcast that is call #2
  kDifferentCall,  // the odd rank calls all_gather where the others broadcast
};

Desync parse(const std::string& name);  // "skip" or "different_call"
const char* name(Desync desync);

// On every rank of the world: call #1 all_reduce, call #2 broadcast (except
// the planted desync on `odd_rank`), call #3 all_reduce. Returns when the
// mismatch has been raised on this rank (the backend must detect it: the
// simulator always, real backends in debug mode); throws std::logic_error if
// it was not.
void plant(Desync desync, int odd_rank);

// What is wrong with the diagnosis of a run of plant(), or nullopt.
std::optional<std::string> check_diagnosis(Desync desync, int odd_rank, int world_size,
                                           const std::string& diagnosis);

}  // namespace desync_cases
