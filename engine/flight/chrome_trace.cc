#include "engine/flight/chrome_trace.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

namespace engine::flight {
namespace {

using Json = nlohmann::json;

struct Span {
  int64_t first = std::numeric_limits<int64_t>::max();
  int64_t last = 0;
};

Span span_of(const std::vector<Record>& records) {
  Span span;
  for (const auto& record : records) {
    for (const auto& e : record.entries) {
      span.first = std::min(span.first, e.start_us);
      span.last = std::max({span.last, e.start_us, e.end_us});
    }
  }
  return span;
}

Json slice(const Entry& e, int rank, const Span& span) {
  const int64_t end = e.end_us > 0 ? e.end_us : span.last;
  Json args{{"group", e.group}, {"state", state_name(e.state)}};
  if (!e.dtype.empty()) {
    args["dtype"] = e.dtype;
    args["shape"] = e.shape;
    args["bytes"] = e.bytes;
  }
  if (!e.op.empty()) args["op"] = e.op;
  if (e.root >= 0) args["root"] = e.root;
  if (e.point_to_point()) args["peer"] = e.peer;
  if (!e.error.empty()) args["error"] = e.error;
  return Json{{"name", e.kind + " #" + std::to_string(e.seq)},
              {"cat", e.point_to_point() ? "point_to_point" : "collective"},
              {"ph", "X"},
              {"pid", rank},
              {"tid", 0},
              {"ts", e.start_us - span.first},
              {"dur", std::max<int64_t>(0, end - e.start_us)},
              {"args", std::move(args)}};
}

Json process_name(int rank) {
  return Json{{"name", "process_name"},
              {"ph", "M"},
              {"pid", rank},
              {"args", {{"name", "rank " + std::to_string(rank)}}}};
}

}  // namespace

std::string chrome_trace(const std::vector<Record>& records) {
  const Span span = span_of(records);
  Json events = Json::array();
  for (const auto& record : records) {
    events.push_back(process_name(record.rank));
    for (const auto& e : record.entries) events.push_back(slice(e, record.rank, span));
  }
  return Json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace engine::flight
