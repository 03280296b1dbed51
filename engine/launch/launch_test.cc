#include "engine/launch/launch.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "engine/dist/errors.h"
#include "engine/launch/hostlist.h"

namespace engine::dist {
namespace {

// The message of the InvalidArgument that `f` throws, "" if none.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(InferLauncher, FollowsMmenginesPrecedence) {
  EXPECT_EQ(infer_launcher({}), "none");
  EXPECT_EQ(infer_launcher({{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}), "mpi");
  EXPECT_EQ(infer_launcher({{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"SLURM_NTASKS", "2"}}), "slurm");
  EXPECT_EQ(infer_launcher({{"SLURM_NTASKS", "2"}, {"WORLD_SIZE", "2"}}), "pytorch");
}

// Any consistent torchrun environment reads back exactly, on every node;
// without GROUP_RANK (an older or hand-written launcher) each rank finds its
// node from its rank.
RC_GTEST_PROP(LaunchSpec, PytorchEnvironmentReadsBack, ()) {
  const int nodes = *rc::gen::inRange(1, 5);
  const int per_node = *rc::gen::inRange(1, 9);
  const int rank = *rc::gen::inRange(0, nodes * per_node);
  const int port = *rc::gen::inRange(1, 65536);
  const bool group_rank_given = *rc::gen::arbitrary<bool>();
  Environment env = {{"RANK", std::to_string(rank)},
                     {"LOCAL_RANK", std::to_string(rank % per_node)},
                     {"WORLD_SIZE", std::to_string(nodes * per_node)},
                     {"LOCAL_WORLD_SIZE", std::to_string(per_node)},
                     {"GROUP_RANK", std::to_string(rank / per_node)},
                     {"MASTER_ADDR", "10.1.2.3"},
                     {"MASTER_PORT", std::to_string(port)}};
  const Environment given = env;
  if (!group_rank_given) env.erase("GROUP_RANK");
  const LaunchSpec spec = launch_spec("pytorch", env);
  RC_ASSERT(spec.rank == rank);
  RC_ASSERT(spec.local_rank == rank % per_node);
  RC_ASSERT(spec.node_rank == rank / per_node);
  RC_ASSERT(spec.master_port == port);
  RC_ASSERT(spec.torchrun_variables() == given);
}

TEST(LaunchSpec, PytorchDefaults) {
  const LaunchSpec spec = launch_spec(
      "pytorch", {{"RANK", "3"}, {"LOCAL_RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}});
  EXPECT_EQ(spec.local_world_size, 4);
  EXPECT_EQ(spec.node_rank, 0);
  EXPECT_EQ(spec.master_port, 29500);
  EXPECT_EQ(
      launch_spec("pytorch",
                  {{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}},
                  LaunchOptions{1234})
          .master_port,
      1234);
}

// torchrun without --standalone hosts the store in its agent: the workers join
// it under the attempt's prefix, as torch.distributed's env:// does.
TEST(LaunchSpec, TorchrunAgentStoreIsJoinedPerAttempt) {
  Environment env = {{"RANK", "1"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}};
  EXPECT_EQ(launch_spec("pytorch", env).agent_store_prefix, "");
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";  // torchrun --standalone
  EXPECT_EQ(launch_spec("pytorch", env).agent_store_prefix, "");
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  EXPECT_EQ(launch_spec("pytorch", env).agent_store_prefix, "/worker/attempt_0");
  env["TORCHELASTIC_RESTART_COUNT"] = "2";
  EXPECT_EQ(launch_spec("pytorch", env).agent_store_prefix, "/worker/attempt_2");
  EXPECT_EQ(launch_spec("pytorch", env).store_libtorch, "");
  env["DIST_ENGINE_STORE_LIBTORCH"] = "2.14";  // engine-launch
  EXPECT_EQ(launch_spec("pytorch", env).store_libtorch, "2.14");
  env["TORCHELASTIC_RESTART_COUNT"] = "x";
  EXPECT_TRUE(has(error_of([&] { launch_spec("pytorch", env); }),
                  "TORCHELASTIC_RESTART_COUNT='x' is not a non-negative whole number"));
}

TEST(LaunchSpec, BadValuesNameTheVariable) {
  const Environment good = {
      {"RANK", "1"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}};
  auto with = [&](const std::string& name, const std::string& value) {
    Environment env = good;
    env[name] = value;
    return error_of([&] { launch_spec("pytorch", env); });
  };
  EXPECT_TRUE(has(with("RANK", "2"), "RANK=2 must be below WORLD_SIZE=2")) << with("RANK", "2");
  EXPECT_TRUE(has(with("RANK", "one"), "RANK='one' is not a non-negative whole number"));
  EXPECT_TRUE(has(with("RANK", "-1"), "RANK='-1'"));
  EXPECT_TRUE(has(with("WORLD_SIZE", "0"), "WORLD_SIZE must be at least 1"));
  EXPECT_TRUE(has(with("MASTER_PORT", "70000"), "MASTER_PORT=70000 is not a TCP port"));
  EXPECT_TRUE(has(with("LOCAL_RANK", "5"), "LOCAL_RANK=5 must be below LOCAL_WORLD_SIZE=2"));
  Environment no_addr = good;
  no_addr.erase("MASTER_ADDR");
  EXPECT_TRUE(has(error_of([&] { launch_spec("pytorch", no_addr); }), "MASTER_ADDR is not set"));
  EXPECT_EQ(error_of([&] {
              launch_spec("pytorch", no_addr, LaunchOptions{std::nullopt, false});
            }),
            "");
  Environment no_rank = good;
  no_rank.erase("RANK");
  EXPECT_TRUE(has(error_of([&] { launch_spec("pytorch", no_rank); }), "RANK is not set"));
  EXPECT_TRUE(has(error_of([&] { launch_spec("torchrun", good); }), "unknown launcher"));
}

TEST(LaunchSpec, MpiGivesLocalRankAndNeedsNoAddressForMpi) {
  const Environment env = {{"OMPI_COMM_WORLD_RANK", "5"},
                           {"OMPI_COMM_WORLD_SIZE", "8"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
  const LaunchSpec spec = launch_spec("mpi", env, LaunchOptions{std::nullopt, false});
  EXPECT_EQ(spec.node_rank, 1);
  // mmengine never sets LOCAL_RANK under mpirun; we hand it on.
  EXPECT_EQ(spec.torchrun_variables().at("LOCAL_RANK"), "1");
  EXPECT_TRUE(has(error_of([&] { launch_spec("mpi", env); }), "MASTER_ADDR is not set"));
  Environment bad = env;
  bad["OMPI_COMM_WORLD_RANK"] = "8";
  EXPECT_TRUE(has(error_of([&] {
                    launch_spec("mpi", bad, LaunchOptions{std::nullopt, false});
                  }),
                  "OMPI_COMM_WORLD_RANK=8 must be below OMPI_COMM_WORLD_SIZE=8"));
}

TEST(LaunchSpec, SlurmExpandsTheNodeListForTheMasterAddress) {
  Environment env = {{"SLURM_PROCID", "5"},
                     {"SLURM_NTASKS", "8"},
                     {"SLURM_LOCALID", "1"},
                     {"SLURM_NODEID", "1"},
                     {"SLURM_NODELIST", "gpu[07-08]"},
                     {"SLURM_TASKS_PER_NODE", "4(x2)"}};
  LaunchSpec spec = launch_spec("slurm", env);
  EXPECT_EQ(spec.master_addr, "gpu07");
  EXPECT_EQ(spec.local_world_size, 4);
  EXPECT_EQ(spec.node_rank, 1);
  EXPECT_EQ(spec.master_port, 29500);
  env["MASTER_ADDR"] = "login1";  // an existing MASTER_ADDR is kept
  env["MASTER_PORT"] = "29600";
  spec = launch_spec("slurm", env, LaunchOptions{31000});  // the argument beats MASTER_PORT
  EXPECT_EQ(spec.master_addr, "login1");
  EXPECT_EQ(spec.master_port, 31000);
  env.erase("SLURM_TASKS_PER_NODE");
  env.erase("SLURM_NODEID");
  EXPECT_EQ(launch_spec("slurm", env).node_rank, 1);  // 8 tasks over 2 nodes
  env["SLURM_NODELIST"] = "gpu[07-09]";
  EXPECT_TRUE(
      has(error_of([&] { launch_spec("slurm", env); }), "does not spread evenly over 3 nodes"));
  env["SLURM_NODELIST"] = "gpu[07-";
  EXPECT_TRUE(
      has(error_of([&] { launch_spec("slurm", env); }), "SLURM_NODELIST='gpu[07-' is malformed"));
}

// Nodes that hold different numbers of tasks, without SLURM_NODEID (srun
// sets it; a task started otherwise may not have it): every rank finds the
// node that holds it, on every node, however the counts differ.
TEST(LaunchSpec, SlurmUnevenNodesPlaceEveryRankWithoutANodeId) {
  for (const std::string counts : {"4,2,4", "2,4(x2)", "1,3", "3,1,2(x2)"}) {
    const std::vector<int> per_node = expand_tasks_per_node(counts, "SLURM_TASKS_PER_NODE");
    int world = 0;
    for (const int n : per_node) world += n;
    int rank = 0;
    for (size_t node = 0; node < per_node.size(); ++node) {
      for (int local = 0; local < per_node[node]; ++local, ++rank) {
        const Environment env = {{"SLURM_PROCID", std::to_string(rank)},
                                 {"SLURM_NTASKS", std::to_string(world)},
                                 {"SLURM_LOCALID", std::to_string(local)},
                                 {"SLURM_NODELIST", "n[1-" + std::to_string(per_node.size()) + "]"},
                                 {"SLURM_TASKS_PER_NODE", counts}};
        const LaunchSpec spec = launch_spec("slurm", env);
        EXPECT_EQ(spec.node_rank, static_cast<int>(node)) << counts << ", rank " << rank;
        EXPECT_EQ(spec.local_world_size, per_node[node]) << counts << ", rank " << rank;
        EXPECT_EQ(spec.local_rank, local) << counts << ", rank " << rank;
      }
    }
  }
}

// What init_dist does under mpirun, whose environment names no node.
TEST(NodeRanksByHostname, NumbersNodesInTheOrderOfTheirLowestRank) {
  using Names = std::vector<std::string>;
  // Uneven nodes, where RANK / LOCAL_SIZE gives rank 3 node 3.
  EXPECT_EQ(node_ranks_by_hostname(Names{"b", "b", "b", "a"}, {3, 3, 3, 1}, 0),
            (std::vector<int>{0, 0, 0, 1}));
  // mpirun --map-by node: a node's ranks are not one run.
  EXPECT_EQ(node_ranks_by_hostname(Names{"x", "y", "x", "y", "z"}, {2, 2, 2, 2, 1}, 4),
            (std::vector<int>{0, 1, 0, 1, 2}));
  EXPECT_EQ(node_ranks_by_hostname(Names{"only"}, {1}, 0), std::vector<int>{0});
}

TEST(NodeRanksByHostname, TwoMachinesWithOneNameAreNamed) {
  const std::string error = error_of([] {
    node_ranks_by_hostname({"n", "n", "n", "n"}, {2, 2, 2, 2}, 3);
  });
  EXPECT_TRUE(has(error,
                  "[rank 3] rank 0 says its node holds 2 ranks, but 4 ranks run on hosts "
                  "named \"n\": give every machine of the job a hostname of its own"))
      << error;
}

}  // namespace
}  // namespace engine::dist
