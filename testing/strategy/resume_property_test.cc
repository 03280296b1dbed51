// A run killed and resumed, once or several times, ends bit-identical to one
// that never stopped: parameters, buffers and each rank's next random draw,
// under DDPStrategy (one checkpoint file), FSDPStrategy and ZeroStrategy
// (sharded checkpoints).
// Resumed at another world size, it starts from the saved state and goes on
// through the data where it stopped.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randperm.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/checkpoint/file.h"
#include "engine/io/file_system.h"
#include "testing/harness.h"
#include "testing/property.h"
#include "testing/strategy/resume_cases.h"

namespace {

using resume_cases::Case;
using resume_cases::Outcome;

std::string work_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "resume" / name;
  harness::once_for_all_processes([&] { engine::io::remove_all(dir); });
  return dir.string();
}

// How often a run saves its state: a checkpoint every `checkpoint` and a
// snapshot every `snapshot` iterations (0: never), no snapshot where a
// checkpoint was written nor after the last iteration. With `overlap` a
// snapshot is committed as the iteration after it ends, before anything
// that iteration saves; else as it is taken.
struct Saving {
  int64_t checkpoint = 0;
  int64_t snapshot = 0;
  int64_t max_iters = 0;
  bool overlap = false;

  static bool every(int64_t interval, int64_t done) {
    return interval > 0 && done > 0 && done % interval == 0;
  }
  bool snapshot_after(int64_t done) const {
    return every(snapshot, done) && !every(checkpoint, done) && done < max_iters;
  }
  // Whether a snapshot is committed as iteration `done` ends.
  bool commit_after(int64_t done) const {
    return overlap ? snapshot_after(done - 1) : snapshot_after(done);
  }
  // The iteration of the newest state saved once `done` iterations ran.
  int64_t newest(int64_t done) const {
    int64_t at = 0;
    for (int64_t i = 1; i <= done; ++i) {
      if (every(checkpoint, i) || (snapshot_after(i) && (!overlap || i < done))) at = i;
    }
    return at;
  }
};

// One crash: after `done` iterations (counted over all of a run's attempts),
// as the next batch is drawn or, where a snapshot is committed then, at its
// commit.
struct Crash {
  int64_t done = 0;
  bool in_commit = false;
};

// A crash plan: one to three crashes, in order.
std::vector<Crash> crash_plan(const Saving& saving) {
  auto points = *rc::gen::container<std::vector<int64_t>>(
      *rc::gen::inRange<size_t>(1, 4), rc::gen::inRange<int64_t>(0, saving.max_iters));
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  std::vector<Crash> plan;
  for (const int64_t done : points) {
    plan.push_back({done, saving.commit_after(done) && *rc::gen::arbitrary<bool>()});
  }
  return plan;
}

// Killed by a plan of crashes anywhere (before the first checkpoint, inside
// an accumulation group, twice between two checkpoints, while a snapshot is
// committed), each attempt resuming from the newest checkpoint or committed
// snapshot ("auto"), a run ends bit-identical to one that never stopped, and
// its last attempt starts from the newest state saved, also when a node's
// snapshot folder was lost or snapshots were written in the background.
HARNESS_PROP(ResumeProperty, ARunCrashedAndResumedAnyNumberOfTimesEndsBitIdentical, ()) {
  const std::string strategy =
      *rc::gen::element<std::string>("DDPStrategy", "FSDPStrategy", "ZeroStrategy");
  Case c =
      *resume_cases::resume_case(*rc::gen::inRange(1, harness::max_world_size(4) + 1), strategy);
  c.process_generator = harness::process_mode();
  const Saving saving{*rc::gen::inRange<int64_t>(0, 5), *rc::gen::inRange<int64_t>(0, 4),
                      c.max_iters, *rc::gen::arbitrary<bool>()};
  const std::vector<Crash> plan = crash_plan(saving);
  const auto straight_dir = work_dir("straight");
  const auto stopped_dir = work_dir("stopped");
  // Snapshots over 1 to world_size nodes, each with its own folder; after a
  // crash, with several, one node may come back without its folder's
  // content (a node replaced): the others hold a copy of all it held.
  const resume_cases::Snapshotting snapshots{saving.snapshot, work_dir("snapshots"), std::nullopt,
                                             *rc::gen::inRange(1, c.world_size + 1),
                                             saving.overlap};
  RC_TAG(c.strategy, c.zero_stage, c.world_size, plan.size(), saving.snapshot > 0,
         saving.overlap ? "overlapped" : "", snapshots.nodes,
         c.comm_hook.is_null() ? "no hook" : "PowerSGD", c.loss_scale.is_null() ? "fp32" : "amp",
         c.zero_redundancy ? "zero-1" : "");
  const auto straight = harness::collect_ranks<Outcome>(c.world_size, [&](int) {
    return resume_cases::train(c, 0, std::nullopt, straight_dir, std::nullopt);
  });
  int64_t resumed_at = 0;
  for (const Crash& crash : plan) {
    resume_cases::Snapshotting attempt = snapshots;
    std::optional<int64_t> crash_at_batch = crash.done + 1 - resumed_at;
    if (crash.in_commit) {
      crash_at_batch.reset();
      attempt.crash_at_commit = 0;
      // A snapshot this attempt took: not the one it resumed from.
      for (int64_t i = resumed_at + 1; i <= crash.done; ++i) {
        const int64_t taken = saving.overlap ? i - 1 : i;
        *attempt.crash_at_commit += taken > resumed_at && saving.commit_after(i) ? 1 : 0;
      }
    }
    try {
      harness::run_ranks(c.world_size, [&](int) {
        resume_cases::train(c, saving.checkpoint, crash_at_batch, stopped_dir, std::string("auto"),
                            attempt);
      });
      RC_FAIL("the attempt was not killed after iteration " + std::to_string(crash.done));
    } catch (const std::runtime_error& error) {  // in processes it arrives as the message
      RC_ASSERT(std::string(error.what()).find(resume_cases::kKilled) != std::string::npos);
    }
    resumed_at = crash.in_commit ? saving.newest(crash.done - 1) : saving.newest(crash.done);
    if (snapshots.nodes > 1 && *rc::gen::arbitrary<bool>()) {
      const int lost = *rc::gen::inRange(0, snapshots.nodes);
      harness::once_for_all_processes(
          [&] { engine::io::remove_all(resume_cases::folder(snapshots.dir, lost)); });
    }
  }
  const auto resumed = harness::collect_ranks<Outcome>(c.world_size, [&](int) {
    return resume_cases::train(c, saving.checkpoint, std::nullopt, stopped_dir, std::string("auto"),
                               snapshots);
  });
  for (int rank = 0; rank < c.world_size; ++rank) {
    RC_ASSERT(static_cast<int64_t>(resumed[rank].batches.size()) == c.max_iters - resumed_at);
    for (const auto& entry : straight[rank].state) {
      RC_ASSERT(at::equal(entry.second, resumed[rank].state.at(entry.first)));
      RC_ASSERT(at::equal(entry.second, straight[0].state.at(entry.first)));
    }
    RC_ASSERT(at::equal(straight[rank].next_draw, resumed[rank].next_draw));
  }
}

// Equal bit for bit, NaN included (a batch of one sample gives BatchNorm a
// NaN running variance; at::equal calls no NaN equal).
bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor x = a.contiguous();
  const at::Tensor y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// The samples that iteration `iteration` of a run took on all its ranks, in
// the order of the epoch's sequence: rank r's j-th at r + world_size * j.
std::vector<int64_t> global_batch(const std::vector<Outcome>& ranks, size_t iteration) {
  const int64_t per_rank = ranks[0].batches.at(iteration).numel();
  std::vector<int64_t> out;
  for (int64_t j = 0; j < per_rank; ++j) {
    for (const Outcome& rank : ranks) {
      RC_ASSERT(rank.batches.at(iteration).numel() == per_rank);
      out.push_back(rank.batches[iteration][j].item<int64_t>());
    }
  }
  return out;
}

// The serial reference of what a run takes from its data: each epoch one
// permutation (seeded by seed + epoch) taken in order, batch size samples
// per rank per iteration; the epoch's last iteration takes what is left,
// padded to a multiple of the world size from the epoch's start.
class EpochStream {
 public:
  explicit EpochStream(int64_t size) : size_(size) {}

  std::vector<int64_t> next(int world_size) {
    if (position_ == 0) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(resume_cases::kSeed + epoch_);
      order_ = at::randperm(size_, generator, at::kLong);
    }
    const int64_t per_rank =
        std::min(resume_cases::kBatchSize, (size_ - position_ + world_size - 1) / world_size);
    std::vector<int64_t> out;
    for (int64_t i = 0; i < per_rank * world_size; ++i) {
      out.push_back(order_[(position_ + i) % size_].item<int64_t>());
    }
    position_ += resume_cases::kBatchSize * world_size;
    if (position_ >= size_) {
      ++epoch_;
      position_ = 0;
    }
    return out;
  }

 private:
  int64_t size_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  at::Tensor order_;
};

// Stopped with a checkpoint at one world size and resumed at another (4 -> 2,
// 2 -> 4, ...): the resumed ranks hold exactly the saved parameters and
// buffers (resharded under FSDP and ZeRO), and the data goes on where it
// stopped, at the new world size: no sample of the epoch twice, none skipped.
HARNESS_PROP(ResumeProperty, ResumedAtAnotherWorldSizeARunGoesOnFromWhereItStopped, ()) {
  const int most = harness::max_world_size(4);
  RC_PRE(most >= 2);
  const std::string strategy =
      *rc::gen::element<std::string>("DDPStrategy", "FSDPStrategy", "ZeroStrategy");
  const int stopped_world = *rc::gen::inRange(1, most + 1);
  int resumed_world = *rc::gen::inRange(1, most);
  if (resumed_world >= stopped_world) ++resumed_world;
  Case c = *resume_cases::resume_case(stopped_world, strategy);
  c.dataset_size = *rc::gen::inRange<int64_t>(5, 41);
  // Pending gradients resume only at the world size that saved them.
  c.stop_at = std::max(c.accumulate, c.stop_at / c.accumulate * c.accumulate);
  c.process_generator = harness::process_mode();
  RC_TAG(c.strategy, c.zero_stage, stopped_world, resumed_world);
  const auto dir = work_dir("rescaled");
  Case stopped = c;
  stopped.max_iters = c.stop_at;
  const auto before = harness::collect_ranks<Outcome>(stopped_world, [&](int) {
    return resume_cases::train(stopped, stopped.max_iters, std::nullopt, dir, std::nullopt);
  });
  const auto landed = harness::collect_ranks<Outcome>(resumed_world, [&](int) {
    return resume_cases::train(stopped, 0, std::nullopt, dir, std::string("auto"));
  });
  const auto after = harness::collect_ranks<Outcome>(resumed_world, [&](int) {
    return resume_cases::train(c, 0, std::nullopt, dir, std::string("auto"));
  });
  for (int rank = 0; rank < resumed_world; ++rank) {
    RC_ASSERT(landed[rank].batches.empty());
    RC_ASSERT(landed[rank].state.size() == before[0].state.size());
    for (const auto& entry : before[0].state) {
      if (!same_bits(entry.second, landed[rank].state.at(entry.first))) {
        RC_FAIL(entry.first + " on rank " + std::to_string(rank) + " is not the one saved");
      }
    }
    for (const auto& entry : after[0].state) {
      RC_ASSERT(same_bits(entry.second, after[rank].state.at(entry.first)));
    }
  }
  EpochStream data(c.dataset_size);
  RC_ASSERT(static_cast<int64_t>(before[0].batches.size()) == c.stop_at);
  for (size_t i = 0; i < before[0].batches.size(); ++i) {
    RC_ASSERT(global_batch(before, i) == data.next(stopped_world));
  }
  RC_ASSERT(static_cast<int64_t>(after[0].batches.size()) == c.max_iters - c.stop_at);
  for (size_t i = 0; i < after[0].batches.size(); ++i) {
    RC_ASSERT(global_batch(after, i) == data.next(resumed_world));
  }
}

// A checkpoint that does not say where the data stood (an older engine's, or
// one a caller saved with its own progress) resumes where its iteration puts
// it at the world size that resumes: at the one that saved, exactly.
TEST(ResumeTest, ACheckpointWithoutItsPlaceInTheDataResumesByItsIteration) {
  Case c;
  c.world_size = 2;
  c.max_iters = 8;  // 40 samples, 8 per iteration: epoch 1 begins at iteration 5
  const auto dir = work_dir("positionless");
  const auto straight = harness::collect_ranks<Outcome>(c.world_size, [&](int) {
    return resume_cases::train(c, 0, std::nullopt, work_dir("straight"), std::nullopt);
  });
  Case stopped = c;
  stopped.max_iters = 6;
  harness::run_ranks(c.world_size, [&](int) {
    resume_cases::train(stopped, stopped.max_iters, std::nullopt, dir, std::nullopt);
  });
  const std::string path = dir + "/iter_6.pth";
  harness::once_for_all_processes([&] {
    auto content = engine::checkpoint::load_file(path).toGenericDict();
    auto meta = content.at("meta").toGenericDict();
    ASSERT_EQ(meta.at("epoch_position").toInt(), 8);
    ASSERT_EQ(meta.erase("epoch_position"), 1u);
    engine::checkpoint::save_file(path, content);
  });
  const auto resumed = harness::collect_ranks<Outcome>(c.world_size, [&](int) {
    return resume_cases::train(c, 0, std::nullopt, dir, std::string("auto"));
  });
  for (int rank = 0; rank < c.world_size; ++rank) {
    ASSERT_EQ(resumed[rank].batches.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(at::equal(resumed[rank].batches[i], straight[rank].batches[6 + i])) << i;
    }
    for (const auto& entry : straight[rank].state) {
      EXPECT_TRUE(same_bits(entry.second, resumed[rank].state.at(entry.first))) << entry.first;
    }
  }
}

// A crash in the middle of a sharded save leaves a folder without its
// marker: "auto" passes it over and resumes from the checkpoint before, and
// the run still ends bit-identical.
TEST(ResumeTest, AnUnfinishedShardedCheckpointIsPassedOver) {
  Case c;
  c.strategy = "FSDPStrategy";
  c.world_size = 2;
  c.max_iters = 6;
  const auto dir = work_dir("unfinished");
  const auto straight = harness::collect_ranks<Outcome>(c.world_size, [&](int) {
    return resume_cases::train(c, 0, std::nullopt, work_dir("straight"), std::nullopt);
  });
  Case stopped = c;
  stopped.max_iters = 4;
  harness::run_ranks(
      c.world_size, [&](int) { resume_cases::train(stopped, 2, std::nullopt, dir, std::nullopt); });
  harness::once_for_all_processes(
      [&] { ASSERT_TRUE(std::filesystem::remove(dir + "/iter_4.pth/COMPLETE")); });
  const auto resumed = harness::collect_ranks<Outcome>(c.world_size, [&](int) {
    return resume_cases::train(c, 0, std::nullopt, dir, std::string("auto"));
  });
  for (int rank = 0; rank < c.world_size; ++rank) {
    EXPECT_EQ(resumed[rank].batches.size(), 4u) << "resumed from iter_2.pth";
    for (const auto& entry : straight[rank].state) {
      EXPECT_TRUE(same_bits(entry.second, resumed[rank].state.at(entry.first))) << entry.first;
    }
  }
}

}  // namespace
