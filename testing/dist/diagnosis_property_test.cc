// The flight recorder's diagnosis on records whose truth is known by
// construction: ranks on the world and on a subgroup, stopped at different
// calls (in flight or failed), some records missing, a planted divergence,
// the records handed over in any order. Every line names the right ranks:
// each rank with a record is placed once, at its own call; the missing ones
// are named and nowhere else; the divergence names the odd rank and its
// peers; each error line carries its own rank's error. The diagnosis does not
// depend on the order of the records.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/dist/describe.h"
#include "engine/flight/diagnosis.h"
#include "engine/flight/record.h"
#include "testing/cases.h"
#include "testing/property.h"

namespace {

namespace flight = engine::flight;
using engine::dist::describe_ranks;
using flight::Entry;

struct Call {
  bool on_subgroup = false;
  std::string kind;
};

struct Scenario {
  int world_size = 0;
  std::vector<int> subgroup;  // sorted, at least 2 ranks
  std::vector<Call> script;   // every rank's calls, in order
  // Per rank: the script index it stops at (script.size(): it finished), and
  // whether that call failed rather than being in flight.
  std::vector<size_t> stop;
  std::vector<bool> failed;
  std::vector<bool> has_record;
  std::optional<std::pair<int, size_t>> odd;  // (rank, script index) issuing another kind
};

void showValue(const Scenario& s, std::ostream& os) {
  os << "world " << s.world_size << ", subgroup [" << describe_ranks(s.subgroup) << "], script:";
  for (const auto& call : s.script) os << " " << call.kind << (call.on_subgroup ? "@sub" : "");
  for (int r = 0; r < s.world_size; ++r) {
    os << "\n  rank " << r << ": stops at " << s.stop[r] << (s.failed[r] ? " (failed)" : "")
       << (s.has_record[r] ? "" : ", no record");
  }
  if (s.odd) os << "\n  rank " << s.odd->first << " diverges at " << s.odd->second;
}

const std::vector<std::string> kKinds = {"all_reduce", "broadcast", "all_gather", "barrier"};

bool is_member(const Scenario& s, const Call& call, int rank) {
  return !call.on_subgroup || std::binary_search(s.subgroup.begin(), s.subgroup.end(), rank);
}

// The global ranks of the group `call` runs on.
std::vector<int> group_of(const Scenario& s, const Call& call) {
  if (call.on_subgroup) return s.subgroup;
  std::vector<int> world;
  for (int r = 0; r < s.world_size; ++r) world.push_back(r);
  return world;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + describe_ranks(ranks);
}

rc::Gen<Scenario> scenarios() {
  return rc::gen::exec([] {
    Scenario s;
    s.world_size = *rc::gen::inRange(2, 9);
    s.subgroup = *cases::subgroup(s.world_size, 2);
    const int length = *rc::gen::inRange(1, 7);
    for (int i = 0; i < length; ++i) {
      s.script.push_back({*rc::gen::arbitrary<bool>(), *rc::gen::elementOf(kKinds)});
    }
    for (int r = 0; r < s.world_size; ++r) {
      s.stop.push_back(*rc::gen::inRange<size_t>(0, s.script.size() + 1));
      s.failed.push_back(*rc::gen::arbitrary<bool>());
      s.has_record.push_back(*rc::gen::inRange(0, 4) != 0);
    }
    s.has_record[*rc::gen::inRange(0, s.world_size)] = true;
    if (*rc::gen::arbitrary<bool>()) {
      s.odd = {*rc::gen::inRange(0, s.world_size), *rc::gen::inRange<size_t>(0, s.script.size())};
    }
    return s;
  });
}

// Rank r's entries: the script's calls on its groups up to its stop, the
// last one in flight or failed unless it finished.
std::vector<Entry> entries_of(const Scenario& s, int rank) {
  std::vector<Entry> entries;
  uint64_t world_seq = 0;
  uint64_t subgroup_seq = 0;
  for (size_t i = 0; i < s.script.size() && i <= s.stop[rank]; ++i) {
    const Call& call = s.script[i];
    if (!is_member(s, call, rank)) continue;
    Entry e;
    e.kind = s.odd && s.odd->first == rank && s.odd->second == i ? "scatter" : call.kind;
    e.seq = call.on_subgroup ? ++subgroup_seq : ++world_seq;
    e.group_id = call.on_subgroup ? "0.1" : "0";
    e.group = group_of(s, call);
    e.dtype = "Float";
    e.shape = {4};
    e.bytes = 16;
    e.state = Entry::State::kCompleted;
    if (i == s.stop[rank]) {
      e.state = s.failed[rank] ? Entry::State::kFailed : Entry::State::kStarted;
      if (s.failed[rank]) e.error = "[rank " + std::to_string(rank) + "] timed out";
    }
    entries.push_back(e);
  }
  return entries;
}

std::vector<flight::Record> records_of(const Scenario& s) {
  std::vector<flight::Record> records;
  for (int r = 0; r < s.world_size; ++r) {
    if (!s.has_record[r]) continue;
    flight::Record record{r, s.world_size, "sim", "Timeout"};
    record.entries = entries_of(s, r);
    record.total = record.entries.size();
    records.push_back(record);
  }
  return records;
}

// "rank 3 ..." or "ranks 0-2, 5 ...": the ranks a part starts with, and the rest.
std::pair<std::vector<int>, std::string> leading_ranks(const std::string& part) {
  std::vector<int> ranks;
  size_t pos = part.find(' ') + 1;
  for (;;) {
    size_t used = 0;
    const int first = std::stoi(part.substr(pos), &used);
    pos += used;
    int last = first;
    if (part[pos] == '-') {
      last = std::stoi(part.substr(pos + 1), &used);
      pos += 1 + used;
    }
    for (int r = first; r <= last; ++r) ranks.push_back(r);
    if (part.compare(pos, 2, ", ") != 0) break;
    pos += 2;
  }
  return {ranks, part.substr(pos)};
}

std::vector<std::string> split(const std::string& text, const std::string& separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t end; (end = text.find(separator, begin)) != std::string::npos;
       begin = end + separator.size()) {
    parts.push_back(text.substr(begin, end - begin));
  }
  parts.push_back(text.substr(begin));
  return parts;
}

// Where the diagnosis must place the rank: its oldest unfinished call, else
// its last one.
std::string expected_position(const flight::Record& record) {
  for (const auto& e : record.entries) {
    if (e.state != Entry::State::kCompleted) return e.describe();
  }
  return record.entries.empty() ? "recorded no call" : record.entries.back().describe();
}

void check_positions(const std::vector<flight::Record>& records, const std::string& line) {
  std::map<int, std::string> placed;
  for (const auto& part : split(line, split(line, " while ").size() == 2 ? " while " : "; ")) {
    const auto [ranks, rest] = leading_ranks(part);
    for (const int r : ranks) {
      RC_ASSERT(placed.count(r) == 0u);
      placed[r] = rest;
    }
  }
  RC_ASSERT(placed.size() == records.size());
  for (const auto& record : records) {
    RC_ASSERT(placed.count(record.rank) == 1u);
    RC_ASSERT(placed[record.rank].find(expected_position(record)) != std::string::npos);
  }
}

// The group's call number of script call `index`.
uint64_t seq_of(const Scenario& s, size_t index) {
  uint64_t seq = 0;
  for (size_t i = 0; i <= index; ++i) seq += s.script[i].on_subgroup == s.script[index].on_subgroup;
  return seq;
}

// A divergence line exactly when the odd rank and a peer (with records) both
// reached the odd call; it names the odd rank and the peers apart.
void check_divergence(const Scenario& s, const std::string& text) {
  const bool any = text.find("divergence") != std::string::npos;
  if (!s.odd) {
    RC_ASSERT(!any);
    return;
  }
  const auto [odd, index] = *s.odd;
  const Call& call = s.script[index];
  auto reached = [&](int r) {
    return s.has_record[r] && is_member(s, call, r) && s.stop[r] >= index;
  };
  std::vector<int> peers;
  for (int r = 0; r < s.world_size; ++r) {
    if (r != odd && reached(r)) peers.push_back(r);
  }
  if (!reached(odd) || peers.empty()) {
    RC_ASSERT(!any);
    return;
  }
  const std::string seq = " #" + std::to_string(seq_of(s, index));
  RC_ASSERT(text.find("first divergence on group [" + describe_ranks(group_of(s, call)) +
                      "] at call" + seq + ": ") != std::string::npos);
  RC_ASSERT(text.find(ranks_text({odd}) + " issued scatter" + seq + " (") != std::string::npos);
  RC_ASSERT(text.find(ranks_text(peers) + " issued " + call.kind + seq + " (") !=
            std::string::npos);
}

// One line per failed rank, with its own error; a missing rank is named once.
void check_errors_and_missing(const Scenario& s, const std::vector<flight::Record>& records,
                              const std::string& text) {
  for (const auto& record : records) {
    for (const auto& e : record.entries) {
      if (e.state != Entry::State::kFailed) continue;
      const std::string rank = std::to_string(record.rank);
      RC_ASSERT(text.find("\nrank " + rank + " failed in " + e.kind + " #" + std::to_string(e.seq) +
                          ": [rank " + rank + "] timed out") != std::string::npos);
    }
  }
  std::vector<int> missing;
  for (int r = 0; r < s.world_size; ++r) {
    if (!s.has_record[r]) missing.push_back(r);
  }
  const bool named = text.find("no record from " + ranks_text(missing) + ": ") != std::string::npos;
  RC_ASSERT(named == !missing.empty());
}

}  // namespace

HARNESS_PROP(Diagnosis, NamesTheRightRanksWhateverTheRecordsOrder, ()) {
  const Scenario s = *scenarios();
  std::vector<flight::Record> records = records_of(s);
  const std::string text = flight::diagnose(records);
  const auto lines = split(text, "\n");
  RC_ASSERT(lines.size() >= 2u);
  // The position line follows the header and, when ranks sent none, the
  // missing-record line.
  const size_t position_line = text.find("no record from") == std::string::npos ? 1 : 2;
  check_positions(records, lines.at(position_line));
  check_divergence(s, text);
  check_errors_and_missing(s, records, text);

  std::vector<flight::Record> shuffled = records;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(*rc::gen::arbitrary<uint32_t>()));
  RC_ASSERT(flight::diagnose(shuffled) == text);
}
