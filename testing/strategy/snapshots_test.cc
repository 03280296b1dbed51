// The snapshot folder's rules (engine/snapshot/snapshots.h) and the runner's
// snapshot options; the crash property in resume_property_test proves that
// runs resumed from snapshots end bit-identical.
#include "engine/snapshot/snapshots.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/equal.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
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
#include "engine/snapshot/folders.h"
#include "examples/classifier.h"
#include "testing/harness.h"
#include "testing/io/failing_file_system.h"

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

std::shared_ptr<engine::strategy::BaseStrategy> prepared_strategy(
    const std::string& type = "DDPStrategy") {
  auto strategy = engine::strategy::strategies().build(
      {{"type", type}, {"seed", 3}, {"seed_process_generator", false}});
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

// Copies of a module's parameters, in order.
std::vector<at::Tensor> parameters_of(torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  for (const auto& parameter : module.parameters()) out.push_back(parameter.detach().clone());
  return out;
}

// Taken in the background, a snapshot holds the state as it was taken though
// training changes it at once, and is not what a restart finds until
// settle() commits it.
TEST(SnapshotsTest, OneTakenInTheBackgroundHoldsTheStateTakenOnceSettled) {
  for (const std::string type : {"DDPStrategy", "FSDPStrategy"}) {
    const std::string folder = fresh_folder("background_" + type);
    harness::run_ranks(2, [&](int) {
      engine::snapshot::Snapshots snapshots(folder);
      auto strategy = prepared_strategy(type);
      snapshots.take(*strategy, {4, 1, 12});
      const std::vector<at::Tensor> taken = parameters_of(strategy->module());
      snapshots.take_in_background(*strategy, {6, 1, 20});
      {
        at::NoGradGuard no_grad;
        for (auto& parameter : strategy->module().parameters()) parameter.add_(1);
      }
      EXPECT_EQ(snapshots.newest()->iter, 4) << type;
      snapshots.settle();
      const auto newest = snapshots.newest();
      ASSERT_TRUE(newest.has_value());
      EXPECT_EQ(newest->iter, 6) << type;
      auto resumed = prepared_strategy(type);
      EXPECT_EQ(resumed->resume(newest->path).progress.epoch_position, 20);
      const std::vector<at::Tensor> held = parameters_of(resumed->module());
      ASSERT_EQ(held.size(), taken.size());
      for (size_t i = 0; i < held.size(); ++i) EXPECT_TRUE(at::equal(held[i], taken[i])) << type;
    });
    EXPECT_EQ(names_in(folder), (std::set<std::string>{"COMMITTED", "snapshot_iter_6.pth"}));
  }
}

TEST(SnapshotsTest, AWriteThatFailsInTheBackgroundFailsSettleOnEveryRank) {
  const std::string folder = fresh_folder("background_failure");
  harness::run_ranks(2, [&](int rank) {
    engine::snapshot::Snapshots snapshots(folder);
    auto strategy = prepared_strategy("FSDPStrategy");
    snapshots.take(*strategy, {4, 1, 12});
    failing_fs::FailingFileSystem disk;
    if (rank == 1) disk.fail_at(0, ENOSPC);
    strategy->set_file_system(disk);
    snapshots.take_in_background(*strategy, {6, 1, 20});
    try {
      snapshots.settle();
      ADD_FAILURE() << "settle() did not fail on rank " << rank;
    } catch (const engine::checkpoint::CheckpointError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("rank 1 could not write the snapshot of iteration 6"),
                std::string::npos)
          << message;
      EXPECT_EQ(message.find("rank 0 could not"), std::string::npos) << message;
    }
    snapshots.settle();  // nothing is pending any more
    EXPECT_EQ(snapshots.newest()->iter, 4);
  });
}

TEST(SnapshotsTest, AMarkerThatCannotBeTrustedIsATypedError) {
  const std::string folder = fresh_folder("marker");
  const engine::snapshot::Snapshots snapshots(folder);
  std::string noted;
  auto error_of = [&] {
    try {
      EXPECT_FALSE(snapshots.newest([&](const std::string& line) { noted = line; }).has_value());
    } catch (const engine::checkpoint::CheckpointError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  std::ofstream(folder + "/COMMITTED") << "dist-engine snapshot\n7\n12 snapshot_iter_7.pth\n";
  EXPECT_EQ(error_of(), "no error");
  EXPECT_EQ(noted,
            "passing over the snapshot of iteration 7: no node's folder holds "
            "snapshot_iter_7.pth (the nodes that held them were lost)");
  for (const std::string marker :
       {"not a marker\n", "dist-engine snapshot\n7\n", "dist-engine snapshot\n7\n12 iter_7.pth\n",
        "dist-engine snapshot\n7\n12snapshot_iter_7.pth\n",
        "dist-engine snapshot\n7\n12 snapshot_iter_7.pth/../../x\n",
        "dist-engine snapshot\n7\n12 /snapshot_iter_7.pth\n",
        "dist-engine snapshot\n7\n-1 snapshot_iter_7.pth\n"}) {
    std::ofstream(folder + "/COMMITTED") << marker;
    EXPECT_NE(error_of().find("snapshot marker " + folder +
                              "/COMMITTED is not a snapshot marker; remove its folder"),
              std::string::npos)
        << marker << ": " << error_of();
  }
}

// The files under `folder`, relative to it.
std::set<std::string> files_under(const std::string& folder) {
  std::set<std::string> out;
  for (const auto& item : fs::recursive_directory_iterator(folder)) {
    if (item.is_regular_file()) out.insert(fs::relative(item.path(), folder).string());
  }
  return out;
}

// Snapshots after iterations 4 and 6 by `nodes` nodes of two ranks each,
// node k's ranks in the k-th of the folders returned.
std::vector<std::string> snapshot_over_nodes(const std::string& name, const std::string& type,
                                             int nodes) {
  std::vector<std::string> folders;
  for (int k = 0; k < nodes; ++k) {
    folders.push_back(fresh_folder(name + "/node_" + std::to_string(k)));
  }
  harness::run_ranks(2 * nodes, [&](int rank) {
    engine::snapshot::Snapshots snapshots(folders[rank / 2]);
    auto strategy = prepared_strategy(type);
    snapshots.take(*strategy, {4, 1, 12});
    snapshots.take(*strategy, {6, 1, 20});
  });
  return folders;
}

// Where each node's ranks write their part of a snapshot: under DDP, rank 0
// the one file; under FSDP, each rank its own file (and rank 0 the index).
TEST(SnapshotsTest, EachNodesFilesAreAlsoInTheNextNodesFolder) {
  const auto ddp = snapshot_over_nodes("ring_ddp", "DDPStrategy", 3);
  EXPECT_EQ(files_under(ddp[0]), (std::set<std::string>{"COMMITTED", "snapshot_iter_6.pth"}));
  EXPECT_EQ(files_under(ddp[1]), files_under(ddp[0]));
  EXPECT_EQ(files_under(ddp[2]), (std::set<std::string>{"COMMITTED"}));
  const auto fsdp = snapshot_over_nodes("ring_fsdp", "FSDPStrategy", 3);
  const auto rank_file = [](int rank) {
    return "snapshot_iter_6.pth/rank_0000" + std::to_string(rank) + ".ckpt";
  };
  for (int node = 0; node < 3; ++node) {
    const auto held = files_under(fsdp[node]);
    const int before = (node + 2) % 3;
    std::set<std::string> expected{"COMMITTED"};
    for (const int writer : {node, before}) {
      expected.insert({rank_file(2 * writer), rank_file(2 * writer + 1)});
      if (writer == 0) {
        expected.insert({"snapshot_iter_6.pth/index.ckpt", "snapshot_iter_6.pth/COMPLETE"});
      }
    }
    EXPECT_EQ(held, expected) << "node " << node;
  }
}

// Each of 3 nodes (two ranks each) writes files of every size around
// `bytes_in_flight` into its folder; copy_between copies them to the next
// node's folder, as a snapshot's publication does.
void copy_around_a_ring(const std::string& name, int64_t bytes_in_flight) {
  const std::vector<int64_t> sizes = {0, 1, 999, 1000, 1001, 2500, 7};
  const auto content = [](int node, size_t file, int64_t size) {
    std::string bytes(static_cast<size_t>(size), '\0');
    for (int64_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(31 * node + 7 * file + i);
    return bytes;
  };
  const auto file_name = [](int node, size_t file) {
    return "node" + std::to_string(node) + "/file" + std::to_string(file);
  };
  std::vector<std::string> folders;
  for (int node = 0; node < 3; ++node) {
    folders.push_back(fresh_folder(name + "_" + std::to_string(node)));
    for (size_t file = 0; file < sizes.size(); ++file) {
      const fs::path path = fs::path(folders[node]) / file_name(node, file);
      fs::create_directories(path.parent_path());
      std::ofstream(path, std::ios::binary) << content(node, file, sizes[file]);
    }
  }
  harness::run_ranks(6, [&](int rank) {
    const engine::snapshot::FolderView view =
        engine::snapshot::survey(folders[rank / 2], "COMMITTED");
    std::vector<engine::snapshot::Copy> copies;
    for (int node = 0; node < view.size(); ++node) {
      for (size_t file = 0; file < sizes.size(); ++file) {
        copies.push_back({file_name(node, file), sizes[file], node, (node + 1) % view.size()});
      }
    }
    engine::snapshot::copy_between(view, folders[rank / 2], copies, bytes_in_flight);
  });
  for (int node = 0; node < 3; ++node) {
    const int before = (node + 2) % 3;
    for (size_t file = 0; file < sizes.size(); ++file) {
      EXPECT_EQ(engine::io::read_file((fs::path(folders[node]) / file_name(before, file)).string()),
                content(before, file, sizes[file]))
          << "node " << node << " file " << file_name(before, file);
    }
  }
}

TEST(SnapshotsTest, CopiesBetweenNodesArriveWholeInWindowsOfAnySize) {
  for (const int64_t bytes_in_flight :
       {int64_t{1}, int64_t{1000}, int64_t{2500}, int64_t{5000}, int64_t{256} << 20}) {
    SCOPED_TRACE("bytes_in_flight " + std::to_string(bytes_in_flight));
    copy_around_a_ring("windows_" + std::to_string(bytes_in_flight), bytes_in_flight);
  }
}

// Resumes on 3 nodes of two ranks from `folders`; what the ranks were told
// (rank 0's), and the iteration resumed (-1: none).
std::pair<int64_t, std::string> resume_over_nodes(const std::vector<std::string>& folders,
                                                  const std::string& type) {
  std::vector<int64_t> resumed(6, -2);
  std::string noted;
  harness::run_ranks(6, [&](int rank) {
    const engine::snapshot::Snapshots snapshots(folders[rank / 2]);
    const auto newest = snapshots.newest([&](const std::string& line) {
      if (rank == 0) noted = line;
    });
    resumed[rank] = newest ? prepared_strategy(type)->resume(newest->path).progress.iter : -1;
  });
  for (const int64_t iter : resumed) EXPECT_EQ(iter, resumed[0]);
  return {resumed[0], noted};
}

TEST(SnapshotsTest, ANodeLostIsRestoredFromTheNextAndTwoAdjacentOnesArePassedOver) {
  for (const std::string type : {"DDPStrategy", "FSDPStrategy"}) {
    auto folders = snapshot_over_nodes("lost_one_" + type, type, 3);
    std::set<std::string> whole = files_under(folders[0]);
    whole.erase("COMMITTED");  // the files come back; the next snapshot commits there
    engine::io::remove_all(folders[1]);
    EXPECT_EQ(resume_over_nodes(folders, type), std::make_pair(int64_t{6}, std::string()));
    for (const auto& folder : folders) {
      EXPECT_TRUE(std::includes(files_under(folder).begin(), files_under(folder).end(),
                                whole.begin(), whole.end()))
          << type << " " << folder;
    }
  }
  // DDP's one file is on nodes 0 and 1; FSDP's rank 2 and 3 on 1 and 2.
  for (const auto& [type, lost] :
       std::vector<std::pair<std::string, std::string>>{{"DDPStrategy", "snapshot_iter_6.pth"},
                                                        {"FSDPStrategy",
                                                         "snapshot_iter_6.pth/rank_00002.ckpt, "
                                                         "snapshot_iter_6.pth/rank_00003.ckpt"}}) {
    auto folders = snapshot_over_nodes("lost_two_" + type, type, 3);
    const int first_lost = type == "DDPStrategy" ? 0 : 1;
    engine::io::remove_all(folders[first_lost]);
    engine::io::remove_all(folders[first_lost + 1]);
    EXPECT_EQ(resume_over_nodes(folders, type),
              std::make_pair(int64_t{-1},
                             "passing over the snapshot of iteration 6: no node's "
                             "folder holds " +
                                 lost + " (the nodes that held them were lost)"));
  }
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
                      "engine-launch (it sets DIST_ENGINE_SNAPSHOT_DIR) or give snapshot_dir"),
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
