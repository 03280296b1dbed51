#include "engine/flight/diagnosis.h"

#include <algorithm>
#include <map>
#include <set>

#include "engine/dist/describe.h"

namespace engine::flight {
namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + dist::describe_ranks(ranks);
}

// Where a rank stands: the oldest call it has not finished, else its last call.
struct Position {
  const Entry* entry = nullptr;  // nullptr: no call recorded
  bool in_flight = false;

  std::string text(bool plural) const {
    if (!entry) return plural ? "have recorded no call" : "has recorded no call";
    if (in_flight && entry->state == Entry::State::kFailed) {
      return "failed in " + entry->describe();
    }
    if (in_flight) return (plural ? "are in " : "is in ") + entry->describe();
    return (plural ? "have no call in flight (last: " : "has no call in flight (last: ") +
           entry->describe() + ")";
  }
};

Position position_of(const Record& record) {
  Position position;
  for (const auto& e : record.entries) {
    if (e.state != Entry::State::kCompleted) return {&e, true};
    position.entry = &e;
  }
  return position;
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : separator) + part;
  return out;
}

std::string where_ranks_are(const std::vector<Record>& records) {
  // position text -> (the position, its ranks)
  std::map<std::string, std::pair<Position, std::vector<int>>> clusters;
  for (const auto& record : records) {
    const Position position = position_of(record);
    auto& cluster = clusters[position.text(false)];
    cluster.first = position;
    cluster.second.push_back(record.rank);
  }
  std::vector<std::pair<Position, std::vector<int>>> ordered;
  for (auto& item : clusters) ordered.push_back(std::move(item.second));
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.second.size(), a.second[0]) <
           std::make_pair(b.second.size(), b.second[0]);
  });
  std::vector<std::string> parts;
  for (const auto& [position, ranks] : ordered) {
    parts.push_back(ranks_text(ranks) + " " + position.text(ranks.size() > 1));
  }
  return join(parts, parts.size() == 2 ? " while " : "; ");
}

// What every rank of a group must agree on at one call number.
std::string signature(const Entry& e) {
  return e.kind + "|" + e.dtype + dist::describe(e.shape) + "|" + std::to_string(e.root) + "|" +
         e.op;
}

// Per group, the first call number at which its ranks issued different calls.
std::vector<std::string> divergences(const std::vector<Record>& records) {
  // group id -> seq -> signature -> (ranks, an entry)
  std::map<std::string,
           std::map<uint64_t, std::map<std::string, std::pair<std::vector<int>, Entry>>>>
      calls;
  for (const auto& record : records) {
    for (const auto& e : record.entries) {
      if (e.point_to_point()) continue;
      auto& slot = calls[e.group_id][e.seq][signature(e)];
      slot.first.push_back(record.rank);
      slot.second = e;
    }
  }
  std::vector<std::string> found;
  for (const auto& [group_id, by_seq] : calls) {
    for (const auto& [seq, variants] : by_seq) {
      if (variants.size() < 2) continue;
      const std::vector<int>& group = variants.begin()->second.second.group;
      std::vector<std::string> parts;
      for (const auto& [sig, issued] : variants) {
        parts.push_back(ranks_text(issued.first) + " issued " + issued.second.describe());
      }
      found.push_back("first divergence on group [" + dist::describe_ranks(group) + "] at call #" +
                      std::to_string(seq) + ": " + join(parts, ", ") +
                      "; a rank skipped or added a collective before it, or chose it from "
                      "rank-local data");
      break;
    }
  }
  return found;
}

std::vector<int> missing_ranks(const std::vector<Record>& records, int world_size) {
  std::set<int> present;
  for (const auto& record : records) present.insert(record.rank);
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    if (!present.count(r)) missing.push_back(r);
  }
  return missing;
}

std::vector<std::string> errors(const std::vector<Record>& records) {
  std::vector<std::string> found;
  for (const auto& record : records) {
    for (const auto& e : record.entries) {
      if (e.state != Entry::State::kFailed) continue;
      found.push_back("rank " + std::to_string(record.rank) + " failed in " + e.kind + " #" +
                      std::to_string(e.seq) + ": " + e.error);
      break;
    }
  }
  return found;
}

}  // namespace

std::string diagnose(const std::vector<Record>& unordered) {
  if (unordered.empty()) return "no flight records\n";
  // Records come in the order the ranks wrote or were read; rank lists and
  // error lines are in rank order.
  std::vector<Record> records = unordered;
  std::sort(records.begin(), records.end(),
            [](const Record& a, const Record& b) { return a.rank < b.rank; });
  int world_size = 0;
  for (const auto& record : records) world_size = std::max(world_size, record.world_size);
  std::vector<std::string> lines{"flight records of " + std::to_string(records.size()) + " of " +
                                 std::to_string(world_size) + " ranks (backend " +
                                 records[0].backend + ")"};
  const std::vector<int> missing = missing_ranks(records, world_size);
  if (!missing.empty()) {
    lines.push_back("no record from " + ranks_text(missing) +
                    ": its process may have died before writing one");
  }
  lines.push_back(where_ranks_are(records));
  for (auto& line : divergences(records)) lines.push_back(std::move(line));
  for (auto& line : errors(records)) lines.push_back(std::move(line));
  return join(lines, "\n") + "\n";
}

}  // namespace engine::flight
