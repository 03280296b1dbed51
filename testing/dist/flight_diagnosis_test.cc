// The flight recorder on the simulator: planted desyncs are diagnosed from
// the files the ranks write when the mismatch is raised.
#include <ATen/core/Tensor.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "engine/dist/dist.h"
#include "engine/flight/diagnosis.h"
#include "engine/flight/record_files.h"
#include "testing/desync_cases.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace {

namespace dist = engine::dist;
namespace flight = engine::flight;
using desync_cases::Desync;

// A fresh folder for one run's records, made the dump folder of the ranks
// created next.
std::string fresh_flight_dir(const std::string& name) {
  static int runs = 0;
  const auto dir = std::filesystem::path(std::getenv("TEST_TMPDIR")) /
                   ("flight_" + name + "_" + std::to_string(++runs));
  std::filesystem::create_directories(dir);
  setenv("DIST_ENGINE_FLIGHT_DIR", dir.c_str(), 1);
  return dir;
}

HARNESS_PROP(FlightDiagnosis, NamesThePlantedDesync, ()) {
  const int world_size = *rc::gen::inRange(2, 7);
  const int odd_rank = *rc::gen::inRange(0, world_size);
  const Desync desync = *rc::gen::element(Desync::kSkip, Desync::kDifferentCall);
  const std::string dir = fresh_flight_dir(desync_cases::name(desync));
  harness::run_ranks(
      world_size, [&](int) { desync_cases::plant(desync, odd_rank); },
      harness::test_options(*rc::gen::arbitrary<uint32_t>()));
  const std::string diagnosis =
      engine::flight::diagnose(engine::flight::read_flight_records({dir}));
  const auto problem = desync_cases::check_diagnosis(desync, odd_rank, world_size, diagnosis);
  RC_ASSERT(!problem);
}

TEST(FlightRecorder, KeepsTheLastCallsOnDemand) {
  setenv("DIST_ENGINE_FLIGHT_SIZE", "3", 1);
  const auto records = harness::collect_ranks<flight::Record>(2, [](int) {
    at::Tensor t = at::ones({2, 3}, at::kDouble);
    for (int i = 0; i < 5; ++i) dist::all_reduce(t);
    dist::broadcast(t, 1);
    return dist::flight_record();
  });
  unsetenv("DIST_ENGINE_FLIGHT_SIZE");
  for (const auto& record : records) {
    EXPECT_EQ(record.total, 6u);
    ASSERT_EQ(record.entries.size(), 3u);
    EXPECT_EQ(record.entries[0].describe(), "all_reduce #4 (group [0-1], 48 B Double[2, 3], sum)");
    EXPECT_EQ(record.entries[2].describe(),
              "broadcast #6 (group [0-1], root 1, 48 B Double[2, 3])");
    for (const auto& e : record.entries) {
      EXPECT_EQ(e.state, flight::Entry::State::kCompleted);
      EXPECT_GE(e.end_us, e.start_us);
    }
  }
}

// Entries reuse the storage of the ones they push out: nothing of an earlier
// call (its peer, root, op, shape, end) may show in a later one.
TEST(FlightRecorder, AnEntryKeepsNothingOfTheOneItReplaced) {
  setenv("DIST_ENGINE_FLIGHT_SIZE", "3", 1);
  const auto records = harness::collect_ranks<flight::Record>(2, [](int rank) {
    at::Tensor t = at::ones({4}, at::kFloat);
    dist::all_reduce(t);
    dist::broadcast(t, 1);
    if (rank == 0) dist::send(t, 1);
    if (rank == 1) dist::recv(t, 0);
    dist::barrier();
    // Not yet waited for, in the slot of the completed all_reduce.
    dist::WorkPtr pending = dist::all_reduce_async(t);
    flight::Record record = dist::flight_record();
    pending->wait();
    return record;
  });
  unsetenv("DIST_ENGINE_FLIGHT_SIZE");
  EXPECT_EQ(records[0].entries[0].describe(), "send #1 (group [0-1], peer 1, 16 B Float[4])");
  EXPECT_EQ(records[1].entries[0].describe(), "recv #1 (group [0-1], peer 0, 16 B Float[4])");
  for (const auto& record : records) {
    const flight::Entry& barrier = record.entries[1];
    EXPECT_EQ(barrier.describe(), "barrier #3 (group [0-1])");
    EXPECT_FALSE(barrier.point_to_point());
    EXPECT_EQ(barrier.root, -1);
    EXPECT_TRUE(barrier.op.empty());
    EXPECT_TRUE(barrier.dtype.empty());
    EXPECT_TRUE(barrier.shape.empty());
    EXPECT_EQ(barrier.bytes, 0);
    const flight::Entry& pending = record.entries[2];
    EXPECT_EQ(pending.describe(), "all_reduce #4 (group [0-1], 16 B Float[4], sum)");
    EXPECT_EQ(pending.state, flight::Entry::State::kStarted);
    EXPECT_EQ(pending.end_us, 0);
    EXPECT_TRUE(pending.error.empty());
  }
}

TEST(FlightRecorder, RecordsSubgroupsByTheirGlobalRanks) {
  const auto records = harness::collect_ranks<flight::Record>(4, [](int rank) {
    auto odd = dist::new_group({1, 3});
    at::Tensor t = at::ones({1});
    if (rank % 2 == 1) dist::broadcast(t, 3, odd);
    return dist::flight_record();
  });
  EXPECT_EQ(records[1].entries.back().describe(),
            "broadcast #1 (group [1, 3], root 3, 4 B Float[1])");
  EXPECT_EQ(records[1].entries.back().group_id, "0.1");
  EXPECT_EQ(records[0].entries.back().kind, "new_group");
  EXPECT_EQ(records[0].entries.back().group_id, "0");
}

// The node-shared buffers' all_reduce is chosen beneath the recorder, so a
// DDP bucket's all_reduce (the reducer keeps its buckets there) is recorded
// like any other call, and a hang in it is diagnosed.
TEST(FlightRecorder, RecordsAllReducesOfNodeSharedBuffers) {
  sim::WorldOptions options = harness::test_options();
  options.node_shared_buffers = true;
  const auto records = harness::collect_ranks<flight::Record>(
      2,
      [](int rank) {
        at::Tensor t = dist::zeros_node_shared(6, at::kFloat);
        if (harness::backend() == "sim" && !dist::is_node_shared(t)) {
          throw std::logic_error("the simulator gave no node-shared buffer");
        }
        t.fill_(rank + 1);
        dist::all_reduce(t);
        if (!t.eq(3).all().item<bool>()) throw std::logic_error("not the sum of both ranks");
        return dist::flight_record();
      },
      options);
  for (const auto& record : records) {
    const flight::Entry& last = record.entries.back();
    EXPECT_EQ(last.kind, "all_reduce");
    EXPECT_NE(last.describe().find("(group [0-1], 24 B Float[6], sum)"), std::string::npos)
        << last.describe();
    EXPECT_EQ(last.state, flight::Entry::State::kCompleted);
  }
}

TEST(FlightRecorder, OffWhenTheSizeIsZero) {
  setenv("DIST_ENGINE_FLIGHT_SIZE", "0", 1);
  harness::run_ranks(2, [](int) { EXPECT_THROW(dist::flight_record(), dist::InvalidArgument); });
  setenv("DIST_ENGINE_FLIGHT_SIZE", "lots", 1);
  try {
    harness::run_ranks(1, [](int) {});
    ADD_FAILURE() << "a malformed DIST_ENGINE_FLIGHT_SIZE was accepted";
  } catch (const dist::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("DIST_ENGINE_FLIGHT_SIZE must be a count"),
              std::string::npos)
        << error.what();
  }
  unsetenv("DIST_ENGINE_FLIGHT_SIZE");
}

}  // namespace
