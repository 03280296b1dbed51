#include "engine/flight/record.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "engine/dist/describe.h"
#include "engine/dist/errors.h"

namespace engine::flight {

using Json = nlohmann::json;

// JSON of the records (found by nlohmann through argument-dependent lookup).
// States are written by name; an unknown name is an error, not a default.
void to_json(Json& j, const Entry::State& state) { j = state_name(state); }

void from_json(const Json& j, Entry::State& state) {
  const auto name = j.get<std::string>();
  for (const auto candidate :
       {Entry::State::kStarted, Entry::State::kCompleted, Entry::State::kFailed}) {
    if (name == state_name(candidate)) {
      state = candidate;
      return;
    }
  }
  throw std::invalid_argument("unknown state \"" + name + "\"");
}

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Entry, kind, seq, group, group_id, dtype, shape, bytes, root,
                                   peer, op, start_us, end_us, state, error)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Record, rank, world_size, backend, reason, total, entries)

const char* state_name(Entry::State state) {
  switch (state) {
    case Entry::State::kStarted:
      return "started";
    case Entry::State::kCompleted:
      return "completed";
    case Entry::State::kFailed:
      return "failed";
  }
  return "?";
}

std::string describe_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), value == static_cast<int64_t>(value) ? "%.0f %s" : "%.1f %s",
                value, units[unit]);
  return text;
}

std::string Entry::describe() const {
  std::string out =
      kind + " #" + std::to_string(seq) + " (group [" + dist::describe_ranks(group) + "]";
  if (point_to_point()) out += ", peer " + std::to_string(peer);
  if (root >= 0) out += ", root " + std::to_string(root);
  if (!dtype.empty()) out += ", " + describe_bytes(bytes) + " " + dtype + dist::describe(shape);
  if (!op.empty()) out += ", " + op;
  return out + ")";
}

std::string to_json(const Record& record) { return Json(record).dump(1); }

namespace {

// nlohmann's get<int64_t>() casts a floating-point value unchecked (undefined
// for 1e24, and integers past uint64 parse as floating point). A record
// holds only integers, so any other number is refused first.
void refuse_fractions(const Json& json) {
  std::vector<const Json*> pending = {&json};
  while (!pending.empty()) {
    const Json* value = pending.back();
    pending.pop_back();
    if (value->is_number_float()) {
      throw std::invalid_argument("a fractional or out-of-range number, " + value->dump());
    }
    if (value->is_structured()) {
      for (const Json& child : *value) pending.push_back(&child);
    }
  }
}

}  // namespace

Record record_from_json(const std::string& text, const std::string& origin) {
  try {
    const Json json = Json::parse(text);
    refuse_fractions(json);
    return json.get<Record>();
  } catch (const std::exception& error) {
    throw dist::InvalidArgument("flight record " + origin + " is not readable: " + error.what() +
                                "; give the files a rank's flight recorder wrote");
  }
}

}  // namespace engine::flight
