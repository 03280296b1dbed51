// The snapshot folder's rules (engine/snapshot/snapshots.h) and the runner's
// snapshot options; the crash property in resume_property_test proves that
// runs resumed from snapshots end bit-identical.
#include "engine/snapshot/snapshots.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint/file.h"
#include "engine/io/file_system.h"
#include "engine/registry/config.h"
#include "engine/runner/runner.h"
#include "examples/classifier.h"
#include "testing/harness.h"

namespace {

namespace fs = std::filesystem;
using engine::registry::Json;

std::string fresh_folder(const std::string& name) {
  const auto dir = fs::path(::testing::TempDir()) / "snapshots" / name;
  engine::io::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::set<std::string> names_in(const std::string& folder) {
  std::set<std::string> out;
  for (const auto& item : fs::directory_iterator(folder)) out.insert(item.path().filename());
  return out;
}

std::shared_ptr<engine::strategy::BaseStrategy> prepared_strategy() {
  auto strategy = engine::strategy::strategies().build(
      {{"type", "DDPStrategy"}, {"seed", 3}, {"seed_process_generator", false}});
  auto rng = at::make_generator<at::CPUGeneratorImpl>(1);
  strategy->prepare(
      std::make_shared<examples::Classifier>(examples::ClassifierOptions{3, 5, 2}, rng),
      {{"optimizer", {{"type", "SGD"}, {"lr", 0.1}}}});
  return strategy;
}

TEST(SnapshotsTest, OnlyTheCommittedSnapshotStaysAndAnotherResumesFromIt) {
  const std::string folder = fresh_folder("committed");
  harness::run_ranks(2, [&](int) {
    engine::snapshot::Snapshots snapshots(folder);
    EXPECT_FALSE(snapshots.newest().has_value());
    auto strategy = prepared_strategy();
    snapshots.take(*strategy, {4, 1, 12});
    snapshots.take(*strategy, {6, 1, 20});
    const auto newest = snapshots.newest();
    ASSERT_TRUE(newest.has_value());
    EXPECT_EQ(newest->iter, 6);
    EXPECT_EQ(names_in(folder), (std::set<std::string>{"COMMITTED", "snapshot_iter_6.pth"}));
    const auto resumed = prepared_strategy()->resume(newest->path).progress;
    EXPECT_EQ(resumed.iter, 6);
    EXPECT_EQ(resumed.epoch_position, 20);
  });
}

TEST(SnapshotsTest, AMarkerThatCannotBeTrustedIsATypedError) {
  const std::string folder = fresh_folder("marker");
  const engine::snapshot::Snapshots snapshots(folder);
  auto error_of = [&] {
    try {
      snapshots.newest();
    } catch (const engine::checkpoint::CheckpointError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  std::ofstream(folder + "/COMMITTED") << "dist-engine snapshot\n7\n";
  EXPECT_NE(error_of().find("names " + folder +
                            "/snapshot_iter_7.pth, which is gone; remove its "
                            "folder to resume from the newest checkpoint instead"),
            std::string::npos)
      << error_of();
  std::ofstream(folder + "/COMMITTED") << "not a marker\n";
  EXPECT_NE(error_of().find("snapshot marker " + folder + "/COMMITTED is not a snapshot marker"),
            std::string::npos)
      << error_of();
}

// The ConfigError a Runner built with `options` throws; "no error" if none.
std::string runner_error_of(const engine::runner::RunnerOptions& options) {
  auto rng = at::make_generator<at::CPUGeneratorImpl>(1);
  try {
    engine::runner::Runner(
        engine::strategy::strategies().build({{"type", "SingleDeviceStrategy"}}),
        std::make_shared<examples::Classifier>(examples::ClassifierOptions{3, 5, 2}, rng),
        {{"optimizer", {{"type", "SGD"}, {"lr", 0.1}}}}, std::nullopt, nullptr, nullptr, nullptr,
        options);
  } catch (const engine::registry::ConfigError& error) {
    return std::string(error.what());
  }
  return std::string("no error");
}

TEST(SnapshotsTest, AnIntervalNeedsAFolderAndMayNotBeNegative) {
  auto error_of = [](int64_t interval, std::optional<std::string> folder) {
    engine::runner::RunnerOptions options;
    options.snapshot_interval = interval;
    options.snapshot_dir = std::move(folder);
    return runner_error_of(options);
  };
  ASSERT_EQ(std::getenv("DIST_ENGINE_SNAPSHOT_DIR"), nullptr);
  EXPECT_NE(error_of(2, std::nullopt)
                .find("train.snapshot_interval 2 needs a folder for the snapshots: run under "
                      "engine-launch on one node (it sets DIST_ENGINE_SNAPSHOT_DIR) or give "
                      "snapshot_dir"),
            std::string::npos);
  EXPECT_NE(error_of(-1, fresh_folder("negative")).find("train.snapshot_interval is -1"),
            std::string::npos);
  EXPECT_EQ(error_of(2, fresh_folder("given")), "no error");
}

// A batch of 0 divided an epoch's length by zero; one of 2^63 - 1
// overflowed the positions an iteration takes.
TEST(RunnerOptionsTest, CountsOutOfRangeAreConfigErrorsNamingTheKey) {
  using Options = engine::runner::RunnerOptions;
  const std::vector<std::pair<std::function<void(Options&)>, std::string>> cases = {
      {[](Options& o) { o.batch_size = 0; },
       "train.batch_size is 0; it must be from 1 to 2147483647"},
      {[](Options& o) { o.batch_size = std::numeric_limits<int64_t>::max(); },
       "train.batch_size is 9223372036854775807"},
      {[](Options& o) { o.max_iters = -1; }, "train.max_iters is -1; it must be from 0 to"},
      {[](Options& o) { o.val_interval = -1; }, "train.val_interval is -1"},
      {[](Options& o) { o.checkpoint_interval = -2; }, "train.checkpoint_interval is -2"},
      {[](Options& o) { o.log_interval = std::numeric_limits<int64_t>::min(); },
       "train.log_interval is -9223372036854775808"}};
  for (const auto& [change, expected] : cases) {
    Options options;
    change(options);
    const std::string error = runner_error_of(options);
    EXPECT_NE(error.find(expected), std::string::npos) << error;
  }
  Options edges;
  edges.batch_size = std::numeric_limits<int32_t>::max();
  edges.max_iters = 0;
  EXPECT_EQ(runner_error_of(edges), "no error");
}

}  // namespace
