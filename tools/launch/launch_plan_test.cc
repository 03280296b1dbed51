#include "tools/launch/launch_plan.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace launch {
namespace {

TEST(ParsePlan, TorchrunFlagsAndTheCommand) {
  const Plan plan =
      parse_plan({"--nproc-per-node", "4", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                  "node7", "--master-port", "29600", "--", "train", "--lr", "1"});
  EXPECT_EQ(plan.nproc_per_node, 4);
  EXPECT_EQ(plan.command, (std::vector<std::string>{"train", "--lr", "1"}));
  const auto env = rank_environment(plan, 3);
  EXPECT_EQ(env.at("RANK"), "7");
  EXPECT_EQ(env.at("LOCAL_RANK"), "3");
  EXPECT_EQ(env.at("WORLD_SIZE"), "8");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("MASTER_ADDR"), "node7");
  EXPECT_EQ(env.at("MASTER_PORT"), "29600");
  // The ranks join node 0's launcher's store, on one node too.
  EXPECT_EQ(env.at("TORCHELASTIC_USE_AGENT_STORE"), "True");
  EXPECT_EQ(rank_environment(parse_plan({"train"}), 0).at("TORCHELASTIC_USE_AGENT_STORE"), "True");
}

TEST(ParsePlan, TheLaunchersFoldersReachTheRanks) {
  Plan plan = parse_plan({"train"});
  EXPECT_EQ(rank_environment(plan, 0).count("DIST_ENGINE_SNAPSHOT_DIR"), 0);
  EXPECT_EQ(rank_environment(plan, 0).count("DIST_ENGINE_WATCH_DIR"), 0);
  EXPECT_EQ(rank_environment(plan, 0).count("DIST_ENGINE_STORE_LIBTORCH"), 0);
  plan.snapshot_dir = "/dev/shm/engine-launch-a";
  plan.store_libtorch = "2.14";
  plan.watch_dir = "/tmp/engine-launch-b/attempt_0";
  const auto env = rank_environment(plan, 0);
  EXPECT_EQ(env.at("DIST_ENGINE_SNAPSHOT_DIR"), "/dev/shm/engine-launch-a");
  EXPECT_EQ(env.at("DIST_ENGINE_WATCH_DIR"), "/tmp/engine-launch-b/attempt_0");
  EXPECT_EQ(env.at("DIST_ENGINE_STORE_LIBTORCH"), "2.14");
}

TEST(ParsePlan, ElasticNodesAndTheRanksOfAnAttempt) {
  const Plan fixed = parse_plan({"--nnodes", "3", "--master-port", "1", "train"});
  EXPECT_EQ(fixed.min_nodes, 3);
  EXPECT_EQ(fixed.nnodes, 3);
  Plan plan = parse_plan({"--nnodes", "1:3", "--node-rank", "2", "--nproc-per-node", "2",
                          "--master-port", "1", "--last-call", "2.5", "train"});
  EXPECT_EQ(plan.min_nodes, 1);
  EXPECT_EQ(plan.nnodes, 3);
  EXPECT_DOUBLE_EQ(plan.last_call_seconds, 2.5);
  EXPECT_EQ(rank_environment(plan, 1).at("RANK"), "5");
  // Node 1 was lost: node 2 is the second of the attempt's two nodes.
  plan.attempt_nodes = 2;
  plan.attempt_node_rank = 1;
  const auto env = rank_environment(plan, 1);
  EXPECT_EQ(env.at("RANK"), "3");
  EXPECT_EQ(env.at("WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_THROW(parse_plan({"--nnodes", "3:2", "--master-port", "1", "train"}),
               std::invalid_argument);
  EXPECT_THROW(parse_plan({"--nnodes", "0:2", "--master-port", "1", "train"}),
               std::invalid_argument);
  EXPECT_THROW(parse_plan({"--nnodes", "1:", "--master-port", "1", "train"}),
               std::invalid_argument);
}

TEST(ParsePlan, HowTheNodesWaitForEachOther) {
  const Plan defaults = parse_plan({"train"});
  EXPECT_EQ(defaults.join_timeout_seconds, 600);
  EXPECT_DOUBLE_EQ(defaults.last_call_seconds, 30);
  EXPECT_DOUBLE_EQ(defaults.monitor_interval_seconds, 0.1);
  const Plan plan = parse_plan({"--join-timeout", "30", "--monitor-interval", "0.5", "train"});
  EXPECT_EQ(plan.join_timeout_seconds, 30);
  EXPECT_DOUBLE_EQ(plan.monitor_interval_seconds, 0.5);
}

TEST(ParsePlan, WhoHostsTheJobsStore) {
  EXPECT_FALSE(parse_plan({"train"}).external_store);
  EXPECT_FALSE(parse_plan({"--store", "node0", "train"}).external_store);
  EXPECT_TRUE(
      parse_plan({"--store", "external", "--master-port", "29500", "train"}).external_store);
  EXPECT_THROW(parse_plan({"--store", "etcd", "--master-port", "1", "train"}),
               std::invalid_argument);
  // engine-store's port is not one a launcher can pick.
  EXPECT_THROW(parse_plan({"--store", "external", "train"}), std::invalid_argument);
}

TEST(ParsePlan, RefusesWhatCannotWork) {
  EXPECT_THROW(parse_plan({"--nproc-per-node", "0", "train"}), std::invalid_argument);
  EXPECT_THROW(parse_plan({"--node-rank", "2", "--nnodes", "2", "--master-port", "1", "train"}),
               std::invalid_argument);
  EXPECT_THROW(parse_plan({"--nnodes", "2", "train"}),
               std::invalid_argument);  // port must be shared
  EXPECT_THROW(parse_plan({"--nproc-per-node", "2"}), std::invalid_argument);  // no program
  EXPECT_THROW(parse_plan({"--bogus", "1", "train"}), std::invalid_argument);
  EXPECT_THROW(parse_plan({"--monitor-interval", "0", "train"}), std::invalid_argument);
  EXPECT_THROW(parse_plan({"--monitor-interval", "1s", "train"}), std::invalid_argument);
  EXPECT_THROW(parse_plan({"--join-timeout", "0", "train"}), std::invalid_argument);
}

TEST(PortNumber, OnlyWholeNumbersInRange) {
  EXPECT_EQ(port_number("29500"), 29500);
  EXPECT_EQ(port_number("65535"), 65535);
  for (const char* bad : {"", "0", "65536", "-1", "29500x", "x"})
    EXPECT_EQ(port_number(bad), std::nullopt) << bad;
}

TEST(FreePort, IsAUsablePort) {
  const int port = free_port();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
}

}  // namespace
}  // namespace launch
