#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engine::flight {

// One collective (or point-to-point call) as a rank's flight recorder saw it.
struct Entry {
  enum class State { kStarted, kCompleted, kFailed };

  std::string kind;  // "all_reduce", "send", ...
  // The rank's n-th collective on this group (1-based); point-to-point calls
  // count separately, since only two ranks take part in each.
  uint64_t seq = 0;
  std::vector<int> group;  // global ranks
  // Tells apart groups with the same ranks: "0" for the world, then
  // "<parent>.<n>" for the parent's n-th new_group (alike on every rank).
  std::string group_id = "0";
  std::string dtype;  // "Float"; empty when the call moves no tensor
  std::vector<int64_t> shape;
  int64_t bytes = 0;  // of one tensor of the call
  int root = -1;      // global rank, -1 when the kind has none
  int peer = -1;      // send/recv: the other side's global rank
  std::string op;     // "sum", ...; empty when the kind reduces nothing
  // Microseconds since the Unix epoch, so that ranks of one host line up.
  // end_us stays 0 while the call is in flight; it is when the rank saw the
  // end (its wait returned), which may be later than the backend finished.
  int64_t start_us = 0;
  int64_t end_us = 0;
  State state = State::kStarted;
  std::string error;  // the first line of the error, when failed

  bool point_to_point() const { return peer >= 0; }
  // "all_reduce #812 (group [0-3], 4 MiB Float[1048576], sum)".
  std::string describe() const;
};

// The last entries of one rank, oldest first.
struct Record {
  int rank = 0;
  int world_size = 0;
  std::string backend;
  std::string reason;  // why it was taken: "Timeout", "CollectiveMismatch", "on demand", ...
  uint64_t total = 0;  // calls recorded since the start; entries hold the last ones
  std::vector<Entry> entries;
};

const char* state_name(Entry::State state);
// "512 B", "4 KiB", "1.5 MiB".
std::string describe_bytes(int64_t bytes);

std::string to_json(const Record& record);
// Throws InvalidArgument naming `origin` (a file name) and what is wrong.
Record record_from_json(const std::string& text, const std::string& origin);

}  // namespace engine::flight
