#include "engine/dist/flight_record.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/dist/describe.h"
#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

using Json = nlohmann::json;

constexpr FlightEntry::State kStates[] = {
    FlightEntry::State::kStarted, FlightEntry::State::kCompleted, FlightEntry::State::kFailed};

FlightEntry::State state_from(const std::string& name) {
  for (const auto state : kStates) {
    if (name == state_name(state)) return state;
  }
  throw std::invalid_argument("unknown state \"" + name + "\"");
}

Json entry_json(const FlightEntry& e) {
  return Json{{"kind", e.kind},
              {"seq", e.seq},
              {"group", e.group},
              {"group_id", e.group_id},
              {"dtype", e.dtype},
              {"shape", e.shape},
              {"bytes", e.bytes},
              {"root", e.root},
              {"peer", e.peer},
              {"op", e.op},
              {"start_us", e.start_us},
              {"end_us", e.end_us},
              {"state", state_name(e.state)},
              {"error", e.error}};
}

FlightEntry entry_from(const Json& j) {
  FlightEntry e;
  j.at("kind").get_to(e.kind);
  j.at("seq").get_to(e.seq);
  j.at("group").get_to(e.group);
  j.at("group_id").get_to(e.group_id);
  j.at("dtype").get_to(e.dtype);
  j.at("shape").get_to(e.shape);
  j.at("bytes").get_to(e.bytes);
  j.at("root").get_to(e.root);
  j.at("peer").get_to(e.peer);
  j.at("op").get_to(e.op);
  j.at("start_us").get_to(e.start_us);
  j.at("end_us").get_to(e.end_us);
  e.state = state_from(j.at("state").get<std::string>());
  j.at("error").get_to(e.error);
  return e;
}

}  // namespace

const char* state_name(FlightEntry::State state) {
  switch (state) {
    case FlightEntry::State::kStarted:
      return "started";
    case FlightEntry::State::kCompleted:
      return "completed";
    case FlightEntry::State::kFailed:
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

std::string FlightEntry::describe() const {
  std::string out = kind + " #" + std::to_string(seq) + " (group [" + describe_ranks(group) + "]";
  if (point_to_point()) out += ", peer " + std::to_string(peer);
  if (root >= 0) out += ", root " + std::to_string(root);
  if (!dtype.empty()) out += ", " + describe_bytes(bytes) + " " + dtype + dist::describe(shape);
  if (!op.empty()) out += ", " + op;
  return out + ")";
}

std::string to_json(const FlightRecord& record) {
  Json entries = Json::array();
  for (const auto& e : record.entries) entries.push_back(entry_json(e));
  return Json{{"rank", record.rank},       {"world_size", record.world_size},
              {"backend", record.backend}, {"reason", record.reason},
              {"total", record.total},     {"entries", std::move(entries)}}
      .dump(1);
}

FlightRecord flight_record_from_json(const std::string& text, const std::string& origin) {
  try {
    const Json j = Json::parse(text);
    FlightRecord record;
    j.at("rank").get_to(record.rank);
    j.at("world_size").get_to(record.world_size);
    j.at("backend").get_to(record.backend);
    j.at("reason").get_to(record.reason);
    j.at("total").get_to(record.total);
    for (const auto& e : j.at("entries")) record.entries.push_back(entry_from(e));
    return record;
  } catch (const std::exception& error) {
    throw InvalidArgument("flight record " + origin + " is not readable: " + error.what() +
                          "; give the files a rank's flight recorder wrote");
  }
}

}  // namespace engine::dist
