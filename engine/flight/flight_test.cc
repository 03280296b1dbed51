#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/dist/errors.h"
#include "engine/flight/chrome_trace.h"
#include "engine/flight/diagnosis.h"
#include "engine/flight/record.h"
#include "engine/flight/record_files.h"
#include "engine/io/file_system.h"

namespace engine::flight {
namespace {

Entry call(const std::string& kind, uint64_t seq, Entry::State state, int64_t start_us = 0,
           int64_t end_us = 0) {
  Entry e;
  e.kind = kind;
  e.seq = seq;
  e.group = {0, 1, 2, 3};
  e.dtype = "Float";
  e.shape = {1048576};
  e.bytes = 4 << 20;
  if (kind == "all_reduce") e.op = "sum";
  if (kind == "broadcast") e.root = 0;
  e.state = state;
  e.start_us = start_us;
  e.end_us = end_us;
  return e;
}

Record record(int rank, std::vector<Entry> entries) {
  Record r{rank, 4, "gloo", "timeout"};
  r.total = entries.size();
  r.entries = std::move(entries);
  return r;
}

const auto kDone = Entry::State::kCompleted;
const auto kStarted = Entry::State::kStarted;
const auto kFailed = Entry::State::kFailed;

TEST(Diagnosis, NamesTheRankThatIsBehind) {
  std::vector<Record> records;
  for (int r = 0; r < 3; ++r) {
    records.push_back(
        record(r, {call("all_reduce", 812, kDone, 10, 20), call("broadcast", 813, kStarted, 30)}));
  }
  records.push_back(record(3, {call("all_reduce", 812, kStarted, 10)}));
  const std::string text = diagnose(records);
  EXPECT_NE(text.find("rank 3 is in all_reduce #812 (group [0-3], 4 MiB Float[1048576], sum) "
                      "while ranks 0-2 are in broadcast #813 (group [0-3], root 0, 4 MiB "
                      "Float[1048576])"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("divergence"), std::string::npos) << text;
}

TEST(Diagnosis, FindsTheFirstCallWhereRanksDiverged) {
  std::vector<Record> records;
  for (int r = 0; r < 4; ++r) {
    const bool odd = r == 2;
    records.push_back(record(r, {
                                    call("barrier", 1, kDone),
                                    call(odd ? "broadcast" : "all_reduce", 2, kFailed),
                                }));
    records.back().entries.back().error = "[rank " + std::to_string(r) + "] mismatch";
  }
  const std::string text = diagnose(records);
  EXPECT_NE(text.find("first divergence on group [0-3] at call #2: ranks 0-1, 3 issued "
                      "all_reduce #2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 2 issued broadcast #2"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 2 failed in broadcast #2: [rank 2] mismatch"), std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 2 failed in broadcast #2 (group [0-3], root 0, 4 MiB Float[1048576]) "
                      "while ranks 0-1, 3 failed in all_reduce #2"),
            std::string::npos)
      << text;
}

TEST(Diagnosis, TellsApartGroupsWithTheSameRanks) {
  std::vector<Record> records;
  for (int r = 0; r < 4; ++r) {
    Entry other = call("broadcast", 1, kDone);
    other.group_id = "0.1";  // a new_group of the same ranks, with its own numbering
    records.push_back(record(r, {call("all_reduce", 1, kDone), other}));
  }
  const std::string text = diagnose(records);
  EXPECT_EQ(text.find("divergence"), std::string::npos) << text;
}

TEST(Diagnosis, NamesRanksWithoutARecord) {
  std::vector<Record> records{record(0, {call("all_reduce", 1, kStarted)}),
                              record(2, {call("all_reduce", 1, kStarted)})};
  const std::string text = diagnose(records);
  EXPECT_NE(text.find("flight records of 2 of 4 ranks"), std::string::npos) << text;
  EXPECT_NE(text.find("no record from ranks 1, 3"), std::string::npos) << text;
  EXPECT_NE(text.find("ranks 0, 2 are in all_reduce #1"), std::string::npos) << text;
}

TEST(Diagnosis, SaysWhenARankHasNothingInFlight) {
  std::vector<Record> records{record(0, {call("all_reduce", 1, kStarted)}),
                              record(1, {call("barrier", 7, kDone)})};
  const std::string text = diagnose(records);
  EXPECT_NE(text.find("rank 1 has no call in flight (last: barrier #7"), std::string::npos) << text;
}

TEST(FlightRecordJson, RoundTripsEveryField) {
  Record original = record(3, {call("broadcast", 5, kFailed, 100, 250)});
  original.entries[0].error = "timed out";
  original.entries[0].peer = -1;
  original.total = 1234;
  const Record back = record_from_json(to_json(original), "memory");
  EXPECT_EQ(to_json(back), to_json(original));
  EXPECT_EQ(back.total, 1234u);
  EXPECT_EQ(back.entries.at(0).state, kFailed);
}

TEST(FlightRecordJson, RejectsAForeignFileNamingIt) {
  try {
    record_from_json("{\"rank\": 1}", "x.json");
    FAIL() << "no error";
  } catch (const dist::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("flight record x.json is not readable"),
              std::string::npos)
        << error.what();
  }
}

// Found by tools/fuzz: nlohmann casts a number like 1.7e24 to int64_t
// unchecked, which is undefined behaviour.
TEST(FlightRecordJson, RefusesNumbersThatAreNotIntegers) {
  const std::string json = to_json(record(3, {call("broadcast", 5, kFailed, 100, 250)}));
  for (const char* number : {"1.7e24", "99999999999999999999", "2.5"}) {
    std::string bad = json;
    const size_t value = bad.find("\"bytes\": ") + 9;
    bad.replace(value, bad.find(',', value) - value, number);
    try {
      record_from_json(bad, "x.json");
      ADD_FAILURE() << "accepted " << number;
    } catch (const dist::InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("a fractional or out-of-range number"),
                std::string::npos)
          << error.what();
    }
  }
}

TEST(ChromeTrace, OneSlicePerCallOneProcessPerRank) {
  std::vector<Record> records{
      record(0, {call("all_reduce", 1, kDone, 1000, 1500), call("broadcast", 2, kStarted, 1600)}),
      record(1, {call("all_reduce", 1, kDone, 1100, 1400)})};
  const auto trace = nlohmann::json::parse(chrome_trace(records));
  const auto& events = trace.at("traceEvents");
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].at("ph"), "M");
  EXPECT_EQ(events[0].at("args").at("name"), "rank 0");
  EXPECT_EQ(events[1].at("name"), "all_reduce #1");
  EXPECT_EQ(events[1].at("ts"), 0);
  EXPECT_EQ(events[1].at("dur"), 500);
  EXPECT_EQ(events[1].at("args").at("op"), "sum");
  // Still in flight: it ends at the latest time seen (1600).
  EXPECT_EQ(events[2].at("ts"), 600);
  EXPECT_EQ(events[2].at("dur"), 0);
  EXPECT_EQ(events[2].at("args").at("state"), "started");
  EXPECT_EQ(events[4].at("pid"), 1);
  EXPECT_EQ(events[4].at("ts"), 100);
}

class RecordFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    // TempDir: Bazel's TEST_TMPDIR, else the system's (a run outside Bazel).
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    engine::io::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(RecordFiles, ReadsEveryRankOfAFolderInRankOrder) {
  write("flight_rank1.json", to_json(record(1, {})));
  write("flight_rank0.json", to_json(record(0, {})));
  write("other.json", "not a record");
  const auto records = read_flight_records({dir_.string()});
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].rank, 0);
  EXPECT_EQ(records[1].rank, 1);
}

TEST_F(RecordFiles, RefusesTwoRecordsOfOneRankAndEmptyFolders) {
  EXPECT_THROW(read_flight_records({dir_.string()}), dist::InvalidArgument);
  write("flight_rank0.json", to_json(record(0, {})));
  write("copy.json", to_json(record(0, {})));
  EXPECT_THROW(read_flight_records({dir_.string(), (dir_ / "copy.json").string()}),
               dist::InvalidArgument);
}

}  // namespace
}  // namespace engine::flight
