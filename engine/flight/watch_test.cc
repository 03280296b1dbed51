#include "engine/flight/watch.h"

#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>

#include "engine/flight/recorder.h"
#include "engine/io/file_system.h"

namespace engine::flight {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(testing::TempDir()) / name;
  engine::io::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Watched, CountsCallsWhereTheLauncherReadsThem) {
  const fs::path dir = fresh_dir("counts");
  EXPECT_FALSE(read_progress(progress_path(dir, 3)).has_value());
  Watched watched(dir, 3, [] {});
  EXPECT_FALSE(read_progress(progress_path(dir, 3))->in_a_call());
  watched.begun();
  watched.begun();
  watched.ended();
  const Progress progress = *read_progress(progress_path(dir, 3));
  EXPECT_EQ(progress.begun, 2u);
  EXPECT_EQ(progress.ended, 1u);
  EXPECT_TRUE(progress.in_a_call());
}

TEST(Watched, AnswersEveryRequestOnItsOwnThreadUntilDestroyed) {
  const fs::path dir = fresh_dir("answers");
  const std::string fifo = dump_request_path(dir, 0);
  EXPECT_FALSE(request_dump(fifo)) << "nobody listens yet";
  for (int round = 0; round < 3; ++round) {
    std::promise<void> dumped;
    Watched watched(dir, 0, [&] { dumped.set_value(); });
    // The thread may not have opened the FIFO yet: a request waits for it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!request_dump(fifo) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(dumped.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  }
  EXPECT_FALSE(fs::exists(fifo)) << "the FIFO outlived its Watched";
  EXPECT_FALSE(request_dump(fifo));
}

TEST(Recorder, WatchedCountsItsCallsAndDumpsOnRequest) {
  const fs::path dir = fresh_dir("recorder");
  RecorderOptions options;
  options.watch_dir = dir;
  Recorder recorder(1, 2, "gloo", options);
  const uint32_t group = recorder.add_group({0, 1}, "0");
  const at::Tensor none;
  const uint64_t first = recorder.begin(engine::dist::Call{"all_reduce", &none}, 1, group);
  recorder.end(first, nullptr);
  recorder.end(first, nullptr);  // a second end is not a second call
  recorder.begin(engine::dist::Call{"barrier", &none}, 2, group);
  const Progress progress = *read_progress(progress_path(dir, 1));
  EXPECT_EQ(progress.begun, 2u);
  EXPECT_EQ(progress.ended, 1u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(record_path(dir, 1)) && std::chrono::steady_clock::now() < deadline) {
    request_dump(dump_request_path(dir, 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(fs::exists(record_path(dir, 1)));
}

}  // namespace
}  // namespace engine::flight
