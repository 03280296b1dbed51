// sync_random_seed, all_reduce_dict, all_reduce_params, collect_results and
// the collectives of host tensors (*_anywhere), including the points where
// mmengine goes wrong (FACTS.md "Better").
#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/dist/dist.h"
#include "engine/io/file_system.h"
#include "testing/cases.h"
#include "testing/harness.h"
#include "testing/io/failing_file_system.h"
#include "testing/property.h"

namespace dist = engine::dist;
namespace fs = std::filesystem;

namespace {

sim::WorldOptions drawn_options() { return harness::test_options(*rc::gen::arbitrary<uint32_t>()); }

// A fresh, empty folder for one test.
fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("dist_engine_test_" + name);
  harness::once_for_all_processes([&] {
    engine::io::remove_all(dir);
    fs::create_directories(dir);
  });
  return dir;
}

int64_t entries_in(const fs::path& dir) {
  return std::distance(fs::directory_iterator(dir), fs::directory_iterator());
}

// Every rank's error from one collect_results of {rank} into `tmpdir` ("no
// error" when it returned), each rank writing through the disk that `disk_of`
// gives it.
std::vector<std::string> collect_errors(
    int world_size, const fs::path& tmpdir,
    const std::function<std::unique_ptr<engine::io::FileSystem>(int rank)>& disk_of) {
  return harness::collect_ranks<std::string>(world_size, [&](int rank) {
    const auto disk = disk_of(rank);
    try {
      dist::collect_results({c10::IValue(rank)}, world_size, "cpu", tmpdir.string(), *disk);
    } catch (const dist::DistError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  });
}

// Each rank's error is rank 0's but for its "[rank r] " prefix, and names
// `what`.
void expect_the_same_error_everywhere(const std::vector<std::string>& errors,
                                      const std::string& what) {
  const std::string prefix = "[rank 0] ";
  ASSERT_EQ(errors[0].rfind(prefix, 0), 0u) << errors[0];
  const std::string shared = errors[0].substr(prefix.size());
  EXPECT_NE(shared.find(what), std::string::npos) << shared;
  for (size_t rank = 1; rank < errors.size(); ++rank) {
    EXPECT_EQ(errors[rank], "[rank " + std::to_string(rank) + "] " + shared);
  }
}

// A disk that keeps only the first half of what each write hands it, and
// says nothing.
class TornWrites : public failing_fs::FailingFileSystem {
 public:
  int write(int handle, std::string_view data) override {
    return FailingFileSystem::write(handle, data.substr(0, data.size() / 2));
  }
};

}  // namespace

TEST(SyncRandomSeed, EveryRankGetsRankZerosDrawInRange) {
  const auto seeds =
      harness::collect_ranks<int64_t>(5, [](int) { return dist::sync_random_seed(); });
  for (const auto seed : seeds) {
    EXPECT_EQ(seed, seeds[0]);
    EXPECT_GE(seed, 0);
    EXPECT_LT(seed, int64_t{1} << 31);
  }
}

HARNESS_PROP(SyncRandomSeed, MembersOfAnyGroupAgreeWhileTheOthersAreBusy, ()) {
  const cases::TensorCase g = *cases::group_case();
  const auto seeds = harness::collect_ranks<int64_t>(
      g.world_size,
      [&](int rank) {
        const auto split = cases::split_world(g.world_size, g.members);
        const int64_t seed =
            cases::is_member(g, rank) ? dist::sync_random_seed(split.members) : int64_t{-1};
        cases::keep_busy(split.others);
        return seed;
      },
      harness::test_options(g.sim_seed));
  const int64_t shared = seeds[g.members.front()];
  RC_ASSERT(shared >= 0);
  RC_ASSERT(shared < int64_t{1} << 31);
  for (int rank = 0; rank < g.world_size; ++rank) {
    RC_ASSERT(seeds[rank] == (cases::is_member(g, rank) ? shared : -1));
  }
}

// Host tensors through the communication device (a GPU's under nccl), on a
// subgroup: the results are the collectives' and stay on the CPU.
TEST(Anywhere, HostTensorsGetTheCollectivesResultsInPlace) {
  // A subgroup without rank 0 and with a gap where the job has the ranks
  // (the simulator's 5), else the whole job (2 processes on one GPU).
  const int world = harness::max_world_size(5);
  const std::vector<int> members = world >= 5 ? std::vector<int>{1, 3, 4} : cases::all_ranks(world);
  const int root = members[members.size() / 2];
  harness::run_ranks(world, [&](int rank) {
    const dist::GroupPtr group = cases::group_of(world, members);
    if (std::find(members.begin(), members.end(), rank) == members.end()) return;
    at::Tensor maximum = at::full({2}, rank, at::kLong);
    dist::all_reduce_anywhere(maximum, "max", group);
    EXPECT_TRUE(maximum.equal(at::full({2}, members.back(), at::kLong)));
    at::Tensor from_root = at::full({3}, 10.0 * rank, at::kDouble);
    dist::broadcast_anywhere(from_root, root, group);
    EXPECT_TRUE(from_root.equal(at::full({3}, 10.0 * root, at::kDouble)));
    const std::vector<at::Tensor> rows =
        dist::all_gather_anywhere(at::full({1}, rank, at::kInt), group);
    ASSERT_EQ(rows.size(), members.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_TRUE(rows[i].device().is_cpu());
      EXPECT_EQ(rows[i].item<int>(), members[i]);
    }
  });
}

// The helpers' properties run on the whole world or (in half the cases) on
// any subgroup: the reference is over its members, and ranks outside it
// keep their values and run collectives of their own meanwhile.
HARNESS_PROP(AllReduceDict, EqualsPerKeyReferenceWithPromotion, ()) {
  const cases::TensorCase g = *cases::group_case();
  const int n = static_cast<int>(g.members.size());
  const auto op = *rc::gen::element<std::string>("sum", "mean", "max");
  // Per key: element count and whether the value is an integer tensor. Up to
  // 40 elements a key, so that some dicts ride in the gathered record (up to
  // 256 bytes) and others take the all_reduce.
  const auto layout = *rc::gen::container<std::map<std::string, std::pair<int, bool>>>(
      rc::gen::string<std::string>(),
      rc::gen::pair(rc::gen::inRange(0, 41), rc::gen::arbitrary<bool>()));
  const uint64_t data_seed = *rc::gen::arbitrary<uint32_t>();
  auto value = [&](const std::string& key, int rank) {
    const auto [count, integral] = layout.at(key);
    cases::TensorCase c;
    c.op = op;
    c.dtype = integral ? c10::kLong : c10::kFloat;
    c.shape = {count};
    c.data_seed = data_seed + std::hash<std::string>{}(key);
    return cases::input_for(c, rank);
  };
  const auto results = harness::collect_ranks<std::map<std::string, at::Tensor>>(
      g.world_size,
      [&](int rank) {
        const auto split = cases::split_world(g.world_size, g.members);
        std::map<std::string, at::Tensor> data;
        for (const auto& [key, spec] : layout) data[key] = value(key, rank);
        if (cases::is_member(g, rank)) dist::all_reduce_dict(data, op, split.members);
        cases::keep_busy(split.others);
        return data;
      },
      harness::test_options(g.sim_seed));
  // Values travel in one buffer whose dtype is the promotion of them all.
  bool any_float = false;
  for (const auto& [key, spec] : layout) any_float |= !spec.second;
  for (const auto& [key, spec] : layout) {
    std::vector<at::Tensor> inputs;
    for (const int r : g.members) {
      at::Tensor v = value(key, r);
      inputs.push_back(n > 1 && any_float ? v.to(at::kFloat) : v);
    }
    const at::Tensor expected = cases::reduce_reference(inputs, op);
    for (int r = 0; r < g.world_size; ++r) {
      RC_ASSERT(
          cases::bit_equal(results[r].at(key), cases::is_member(g, r) ? expected : value(key, r)));
    }
  }
}

TEST(AllReduceDict, DifferentKeysRaiseMismatchOnEveryRankNamingThem) {
  std::vector<std::string> messages(3);
  harness::run_ranks(3, [&](int rank) {
    std::map<std::string, at::Tensor> data = {{"loss", at::ones({1})}};
    if (rank == 1) data["acc"] = at::ones({1});
    try {
      dist::all_reduce_dict(data);
    } catch (const dist::CollectiveMismatch& e) {
      messages[rank] = e.what();
    }
  });
  for (const auto& m : messages) {
    EXPECT_NE(m.find("acc: Float[1]"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
  }
}

HARNESS_PROP(AllReduceParams, CoalescedAndPerTensorPathsAgree, ()) {
  const cases::TensorCase g = *cases::group_case();
  const int bucket_size_mb = *rc::gen::element(-1, 1);
  const auto op = *rc::gen::element<std::string>("sum", "mean", "min");
  // Up to 6 params of up to 100k elements: several 1 MiB buckets, per dtype.
  const auto shapes = *rc::gen::container<std::vector<std::pair<int, bool>>>(
      *rc::gen::inRange<size_t>(0, 7),
      rc::gen::pair(rc::gen::inRange(0, 100000), rc::gen::arbitrary<bool>()));
  const uint64_t data_seed = *rc::gen::arbitrary<uint32_t>();
  auto params_of = [&](int rank) {
    std::vector<at::Tensor> params;
    for (size_t i = 0; i < shapes.size(); ++i) {
      cases::TensorCase c;
      c.op = op;
      c.dtype = shapes[i].second ? c10::kDouble : c10::kFloat;
      c.shape = {shapes[i].first};
      c.data_seed = data_seed;
      params.push_back(cases::input_for(c, rank, static_cast<int>(i)));
    }
    return params;
  };
  auto run = [&](bool coalesce) {
    return harness::collect_ranks<std::vector<at::Tensor>>(
        g.world_size,
        [&](int rank) {
          const auto split = cases::split_world(g.world_size, g.members);
          auto params = params_of(rank);
          if (cases::is_member(g, rank))
            dist::all_reduce_params(params, coalesce, bucket_size_mb, op, split.members);
          cases::keep_busy(split.others);
          return params;
        },
        harness::test_options(g.sim_seed));
  };
  const auto coalesced = run(true);
  const auto per_tensor = run(false);
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::vector<at::Tensor> inputs;
    for (const int r : g.members) inputs.push_back(params_of(r)[i]);
    const at::Tensor expected = cases::reduce_reference(inputs, op);
    for (int r = 0; r < g.world_size; ++r) {
      const at::Tensor want = cases::is_member(g, r) ? expected : params_of(r)[i];
      RC_ASSERT(cases::bit_equal(coalesced[r][i], want));
      RC_ASSERT(cases::bit_equal(per_tensor[r][i], want));
    }
  }
}

// The dataset holds ints and genuine None results (mmengine drops those and
// shifts what follows). Rank r processes items r, r+n, ... as the sampler
// hands them out; padding repeats items from the start.
HARNESS_PROP(CollectResults, RestoresDatasetOrderKeepingNone, ()) {
  const int n = *rc::gen::inRange(1, 9);
  const auto device = *rc::gen::element<std::string>("cpu", "gpu");
  const bool padded = *rc::gen::arbitrary<bool>();
  const auto is_none = *rc::gen::container<std::vector<bool>>(rc::gen::arbitrary<bool>());
  const auto size = static_cast<int64_t>(is_none.size());
  std::vector<c10::IValue> dataset;
  for (int64_t i = 0; i < size; ++i) dataset.push_back(is_none[i] ? c10::IValue() : c10::IValue(i));
  const int64_t per_rank = (size + n - 1) / n;
  const auto results = harness::collect_ranks<std::optional<std::vector<c10::IValue>>>(
      n,
      [&](int rank) {
        std::vector<c10::IValue> part;
        const int64_t end = padded ? per_rank * n : size;
        for (int64_t i = rank; i < end; i += n) part.push_back(dataset[size ? i % size : 0]);
        return dist::collect_results(part, size, device);
      },
      drawn_options());
  RC_ASSERT(results[0].has_value());
  const auto& merged = *results[0];
  RC_ASSERT(static_cast<int64_t>(merged.size()) == size);
  for (int64_t i = 0; i < size; ++i) {
    RC_ASSERT(merged[i].isNone() == is_none[i]);
    if (!is_none[i]) RC_ASSERT(merged[i].toInt() == i);
  }
  for (int r = 1; r < n; ++r) RC_ASSERT(!results[r].has_value());
}

TEST(CollectResults, NeverDeletesTheCallersFolderAndLeavesItClean) {
  const fs::path dir = fresh_dir("keep");
  fs::create_directories(dir / "mine");
  harness::run_ranks(
      4, [&](int rank) { dist::collect_results({c10::IValue(rank)}, 4, "cpu", dir.string()); });
  EXPECT_TRUE(fs::exists(dir / "mine"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  engine::io::remove_all(dir);
}

TEST(CollectResults, LongTmpdirPathsWork) {
  // mmengine shares the path as a 512-byte tensor: longer paths break there.
  fs::path dir = fresh_dir("long");
  while (dir.string().size() < 700) dir /= std::string(60, 'd');
  const auto results = harness::collect_ranks<std::optional<std::vector<c10::IValue>>>(
      3,
      [&](int rank) { return dist::collect_results({c10::IValue(rank)}, 3, "cpu", dir.string()); });
  ASSERT_TRUE(results[0].has_value());
  EXPECT_EQ((*results[0])[2].toInt(), 2);
  engine::io::remove_all(fresh_dir("long"));
}

TEST(CollectResults, BackToBackCallsOnOneFolderDoNotMixUp) {
  const fs::path dir = fresh_dir("back_to_back");
  harness::run_ranks(4, [&](int rank) {
    for (int64_t call = 0; call < 20; ++call) {
      const auto merged =
          dist::collect_results({c10::IValue(call * 10 + rank)}, 4, "cpu", dir.string());
      if (rank != 0) continue;
      for (int r = 0; r < 4; ++r) {
        if ((*merged)[r].toInt() != call * 10 + r) throw std::logic_error("call results mixed up");
      }
    }
  });
  engine::io::remove_all(dir);
}

// One rank's disk fails (full) at one step of writing its part, for every
// rank and every step: every rank throws the same error naming that rank,
// none waits for it, and the call's folder is gone.
TEST(CollectResults, AWriteThatFailsOnAnyRankAtAnyStepStopsEveryRankAndLeavesNothing) {
  const int world_size = harness::max_world_size(3);
  const fs::path dir = fresh_dir("failing_write");
  std::vector<int> steps(world_size);
  collect_errors(world_size, dir, [&](int rank) {
    struct Counting : failing_fs::FailingFileSystem {
      explicit Counting(int& steps) : steps_(steps) {}
      ~Counting() override { steps_ = steps(); }
      int& steps_;
    };
    return std::make_unique<Counting>(steps[rank]);
  });
  int planted = 0;
  for (int failing = 0; failing < world_size; ++failing) {
    // In process mode only this process's count is known; every rank writes
    // its part in the same steps.
    const int count = steps[harness::process_mode() ? harness::process_rank() : failing];
    ASSERT_GT(count, 0);
    for (int step = 0; step < count; ++step, ++planted) {
      const auto errors = collect_errors(world_size, dir, [&](int rank) {
        auto disk = std::make_unique<failing_fs::FailingFileSystem>();
        if (rank == failing) disk->fail_at(step, ENOSPC);
        return disk;
      });
      SCOPED_TRACE("rank " + std::to_string(failing) + " failing at step " + std::to_string(step));
      expect_the_same_error_everywhere(
          errors, "collect_results: rank " + std::to_string(failing) + " could not write its part");
      EXPECT_NE(errors[0].find(std::strerror(ENOSPC)), std::string::npos) << errors[0];
      EXPECT_EQ(errors[0].find("\n"), std::string::npos) << "more than one rank named";
      harness::once_for_all_processes([&] { EXPECT_EQ(entries_in(dir), 0); });
    }
  }
  std::cout << "collect_results: " << planted << " faults planted\n";
  harness::once_for_all_processes([&] { engine::io::remove_all(dir); });
}

TEST(CollectResults, AFolderRankZeroCannotCreateStopsEveryRank) {
  const fs::path dir = fresh_dir("not_a_folder");
  harness::once_for_all_processes([&] { std::ofstream(dir / "file") << "x"; });
  const auto errors = collect_errors(harness::max_world_size(3), dir / "file", [](int) {
    return std::make_unique<failing_fs::FailingFileSystem>();
  });
  expect_the_same_error_everywhere(
      errors, "rank 0 could not create the call's folder: in " + (dir / "file").string());
  EXPECT_NE(errors[0].find("pass another tmpdir"), std::string::npos) << errors[0];
  harness::once_for_all_processes([&] { engine::io::remove_all(dir); });
}

// Rank 0 reads back a part that the last rank's disk tore: every rank hears
// of it, and the folder is gone.
TEST(CollectResults, APartRankZeroCannotReadStopsEveryRankAndLeavesNothing) {
  const int world_size = harness::max_world_size(3);
  const fs::path dir = fresh_dir("torn_part");
  const auto errors = collect_errors(world_size, dir, [&](int rank) {
    return rank == world_size - 1 ? std::make_unique<TornWrites>()
                                  : std::make_unique<failing_fs::FailingFileSystem>();
  });
  expect_the_same_error_everywhere(errors,
                                   "rank 0 could not read the parts back and remove them: ");
  EXPECT_NE(errors[0].find("part_" + std::to_string(world_size - 1) + ".pkl"), std::string::npos)
      << errors[0];
  harness::once_for_all_processes([&] {
    EXPECT_EQ(entries_in(dir), 0);
    engine::io::remove_all(dir);
  });
}

TEST(CollectResults, RejectsUnknownDevice) {
  EXPECT_THROW(dist::collect_results({}, 0, "tpu"), dist::InvalidArgument);
}
