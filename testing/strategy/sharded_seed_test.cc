// The seed of tools/fuzz/sharded_checkpoint_fuzz (a sharded checkpoint of
// two ranks, joined into the fuzz target's input) loads at any world size
// as a fresh save of the same state does, so the fuzzer starts from what the
// engine reads. With SHARDED_SEED_OUT=<absolute path> set, the test writes a
// fresh seed there. From the repository's root:
//   export SHARDED_SEED_OUT=$PWD/tools/fuzz/corpus/sharded_checkpoint/two_ranks
//   bazel run //testing/strategy:strategy_tests -- --gtest_filter='ShardedSeed.*'
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "engine/checkpoint/sharded/sharded_checkpoint.h"
#include "engine/optim/optimizer_state.h"
#include "testing/harness.h"
#include "tools/fuzz/sharded_input.h"

namespace {

using engine::checkpoint::ShardedState;

const char* kSeed = "tools/fuzz/corpus/sharded_checkpoint/two_ranks";

// Whole values, exact in float, distinct per parameter and per entry.
std::map<std::string, at::Tensor> full_parameters() {
  return {{"weight", at::arange(1, 16, at::kFloat).view({5, 3})},
          {"bias", at::full({1}, 7.0)},
          {"scale", at::scalar_tensor(2.5)},
          {"empty", at::zeros({0, 2})}};
}

at::Tensor chunk_of(const at::Tensor& full, const engine::model::sharding::LocalShard& shard) {
  at::Tensor out = at::zeros(shard.layout.shard_sizes());
  engine::model::sharding::copy_shard(full.contiguous(), shard.layout, shard.chunk, out.view({-1}));
  return out;
}

// What rank `rank` of `world` holds: the parameters above, and Adam-like
// state for "weight" (a sharded exp_avg, a whole step).
ShardedState saved_state(int rank, int world) {
  ShardedState state = fuzz::model_state(rank, world);
  const auto full = full_parameters();
  for (auto& shard : state.shards) {
    shard.data = chunk_of(full.at(shard.name), shard);
    if (shard.name != "weight") continue;
    auto values = engine::optim::empty_value_dict();
    values.insert("exp_avg", chunk_of(full.at("weight") * 2, shard));
    values.insert("step", at::scalar_tensor(3.0));
    state.optimizer.insert_or_assign("weight", values);
  }
  return state;
}

// Loads `dir` as every rank of `world` and compares with saved_state.
void expect_loads_at(const std::string& dir, int world) {
  for (int rank = 0; rank < world; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(world));
    ShardedState mine = fuzz::model_state(rank, world);
    const ShardedState expected = saved_state(rank, world);
    engine::checkpoint::load_sharded(dir, mine);
    for (size_t i = 0; i < mine.shards.size(); ++i) {
      EXPECT_TRUE(at::equal(mine.shards[i].data, expected.shards[i].data)) << mine.shards[i].name;
    }
    const auto& state = mine.optimizer.at("weight");
    EXPECT_TRUE(at::equal(state.at("exp_avg").toTensor(),
                          expected.optimizer.at("weight").at("exp_avg").toTensor()));
    EXPECT_TRUE(at::equal(state.at("step").toTensor(), at::scalar_tensor(3.0)));
  }
}

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "sharded_seed" / name;
  std::filesystem::remove_all(dir);
  return dir.string();
}

TEST(ShardedSeed, AFreshSaveAndTheCommittedSeedLoadAtAnyWorldSize) {
  const std::string saved = temp_dir("saved");
  harness::run_ranks(2, [&](int rank) {
    engine::checkpoint::save_sharded(saved, saved_state(rank, 2),
                                     engine::optim::empty_value_dict());
  });
  const std::string seed = fuzz::join_files(fuzz::read_files(saved));
  if (const char* out = std::getenv("SHARDED_SEED_OUT"))
    std::ofstream(out, std::ios::binary) << seed;

  std::ifstream in(kSeed, std::ios::binary);
  ASSERT_TRUE(in) << kSeed;
  const std::string committed((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
  for (const auto& [name, input] : {std::pair{"fresh", seed}, std::pair{"committed", committed}}) {
    SCOPED_TRACE(name);
    const std::string dir = temp_dir(name);
    fuzz::write_files(dir, fuzz::split_files(input));
    for (int world : {1, 2, 3}) expect_loads_at(dir, world);
  }
}

}  // namespace
