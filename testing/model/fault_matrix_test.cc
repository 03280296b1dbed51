// The fault matrix: a short training run on 4 simulated ranks under DDP,
// FSDP's FULL_SHARD and ZeRO-2, with a crash injected at every call index of
// every rank. Every survivor must end
// with an error naming the crashed rank (never a hang, never success with a
// rank missing), and a run whose faults are only delays must end exactly as
// a run without faults. Virtual time: the matrix takes no wall-clock timeouts.
#include <gtest/gtest.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "engine/dist/dist.h"
#include "sim/world.h"
#include "testing/cases.h"
#include "testing/harness.h"
#include "testing/model/ddp_cases.h"
#include "testing/model/sharding_cases.h"

namespace {

constexpr int kWorld = 4;

ddp_cases::TrainingCase short_run() {
  ddp_cases::TrainingCase c;
  c.spec.trunk = {5, 3};
  c.spec.batch_norm = true;  // SyncBatchNorm: collectives inside forward too
  c.world_size = kWorld;
  c.batch = 2;
  c.iterations = 3;
  c.bucket_cap_bytes = 64;  // several buckets per step
  c.used_heads.assign(c.iterations, std::vector<std::vector<bool>>(kWorld, {true}));
  c.head_order.assign(c.iterations, std::vector<std::vector<int64_t>>(kWorld, {0}));
  c.members = cases::all_ranks(kWorld);
  c.seed = 5;
  return c;
}

// The same net, batches and steps under a sharding wrapper: "FULL_SHARD"
// (every Linear a unit) or "ZERO_2" (several buckets).
sharding_cases::ShardingCase short_sharded_run(const std::string& strategy) {
  const auto ddp = short_run();
  sharding_cases::ShardingCase c;
  c.spec = ddp.spec;
  c.world_size = kWorld;
  c.batch = ddp.batch;
  c.iterations = ddp.iterations;
  c.strategy = strategy;
  c.wrap = "layers";
  c.reduce_bucket_size = 16;
  c.overlap_comm = true;
  c.used_heads = ddp.used_heads;
  c.head_order = ddp.head_order;
  c.members = ddp.members;
  c.seed = ddp.seed;
  return c;
}

const std::vector<std::string> kWrappers = {"DDP", "FULL_SHARD", "ZERO_2"};

// One rank's training under `wrapper`: its parameters after every step.
std::function<ddp_cases::Snapshots(int)> rank_body(const std::string& wrapper) {
  if (wrapper == "DDP") {
    const auto c = short_run();
    std::shared_ptr<const nets::TestNet> initial = ddp_cases::initial_net(c);
    return [c, initial](int rank) { return ddp_cases::train_rank(c, *initial, rank); };
  }
  const auto c = short_sharded_run(wrapper);
  torch::manual_seed(c.seed);
  std::shared_ptr<const nets::TestNet> initial = nets::make_net(c.spec);
  return
      [c, initial](int rank) { return sharding_cases::train_rank(c, *initial, rank).parameters; };
}

struct TrainingRun {
  sim::World::Outcome outcome;
  std::vector<ddp_cases::Snapshots> snapshots{kWorld};
  std::vector<uint64_t> calls = std::vector<uint64_t>(kWorld);  // per rank, from its flight record
};

TrainingRun train(const sim::FaultPlan& plan, const std::string& wrapper) {
  const auto body = rank_body(wrapper);
  sim::WorldOptions options = harness::test_options();
  options.faults = plan;
  options.virtual_time = true;
  options.timeout = std::chrono::minutes(30);
  at::set_num_threads(1);
  TrainingRun run;
  run.outcome = sim::World(kWorld, options).run_all([&](int rank) {
    run.snapshots[rank] = body(rank);
    run.calls[rank] = engine::dist::flight_record().total;
  });
  return run;
}

TEST(FaultMatrix, EverySurvivorOfACrashNamesTheCrashedRank) {
  int runs = 0;
  for (const std::string& wrapper : kWrappers) {
    const TrainingRun clean = train({}, wrapper);
    ASSERT_FALSE(clean.outcome.root_cause)
        << wrapper << ": " << sim::error_message(clean.outcome.root_cause);
    for (int crashed = 0; crashed < kWorld; ++crashed) {
      ASSERT_GT(clean.calls[crashed], 10u) << wrapper << ": the run is too short to be a matrix";
      for (uint64_t call = 1; call <= clean.calls[crashed]; ++call) {
        sim::FaultPlan plan{{sim::Fault{sim::Fault::Kind::kCrash, crashed, call}}};
        const TrainingRun run = train(plan, wrapper);
        ++runs;
        const std::string where = wrapper + ", plan " + plan.to_string();
        EXPECT_STREQ(sim::error_kind(run.outcome.root_cause), "InjectedCrash") << where;
        for (int r = 0; r < kWorld; ++r) {
          if (r == crashed) continue;
          const std::string message = sim::error_message(run.outcome.errors[r]);
          EXPECT_STREQ(sim::error_kind(run.outcome.errors[r]), "PeerFailure")
              << where << ", rank " << r << ": " << message;
          EXPECT_NE(message.find("rank " + std::to_string(crashed) + " failed"), std::string::npos)
              << where << ", rank " << r << ": " << message;
        }
      }
    }
  }
  RecordProperty("runs", runs);
}

TEST(FaultMatrix, StragglersChangeNothing) {
  for (const std::string& wrapper : kWrappers) {
    const TrainingRun clean = train({}, wrapper);
    for (const char* text : {"delay:0@1+500ms", "delay:3@7+59000ms,delay:1@2+1000ms",
                             "delay:2@12+3000ms,delay:0@12+3000ms"}) {
      const TrainingRun run = train(sim::FaultPlan::parse(text), wrapper);
      ASSERT_FALSE(run.outcome.root_cause)
          << wrapper << " " << text << ": " << sim::error_message(run.outcome.root_cause);
      for (int r = 0; r < kWorld; ++r) {
        for (size_t it = 0; it < clean.snapshots[r].size(); ++it) {
          for (const auto& [name, value] : clean.snapshots[r][it]) {
            EXPECT_TRUE(at::equal(value, run.snapshots[r][it].at(name)))
                << wrapper << " " << text << " " << name;
          }
        }
      }
    }
  }
}

TEST(Determinism, RunsReplayUnderEverySeedAndSwarmPlan) {
  at::set_num_threads(1);
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const auto body = rank_body(kWrappers[seed % kWrappers.size()]);
    sim::WorldOptions options = harness::test_options(seed);
    options.deterministic = true;
    options.timeout = std::chrono::minutes(30);
    options.faults = sim::FaultPlan::swarm(seed, kWorld, 40, std::chrono::seconds(5));
    const auto violation =
        sim::determinism_violation(kWorld, options, [&](int rank) { body(rank); });
    EXPECT_FALSE(violation) << options.faults.to_string() << ": " << *violation;
  }
}

}  // namespace
