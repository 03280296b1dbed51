#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

// What engine-launch starts: its arguments, and the environment of each rank.
namespace launch {

struct Plan {
  int nproc_per_node = 1;
  // --nnodes N or MIN:MAX: the job's nodes, and the fewest an attempt may
  // run on (N alone: all of them). With fewer than MAX, an attempt starts
  // once MIN nodes joined and the others have not within --last-call
  // seconds; a job that loses a node goes on with the others.
  int nnodes = 1;
  int min_nodes = 1;
  double last_call_seconds = 30;
  int node_rank = 0;
  // The nodes that run this attempt and this node's place among them (the
  // supervisor sets them at each attempt; RANK, WORLD_SIZE and GROUP_RANK
  // follow them).
  int attempt_nodes = 1;
  int attempt_node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port (one node only)
  // --store external: engine-store hosts the job's store at
  // MASTER_ADDR:MASTER_PORT, so the job can lose any node, node 0 included;
  // otherwise (--store node0) node 0's launcher hosts it.
  bool external_store = false;
  int grace_seconds = 5;  // SIGTERM, then SIGKILL after this long
  // torchrun's --max-restarts: a failed job starts again this many times.
  int max_restarts = 0;
  int restart_count = 0;  // which attempt this is, from 0
  // With --nnodes > 1: how long the nodes' launchers wait for each other at
  // each attempt's start, and how often each looks for another's failure.
  int join_timeout_seconds = 600;
  double monitor_interval_seconds = 0.1;
  // With --nnodes > 1: every launcher beats through the store each monitor
  // interval; the attempt's first node counts another whose beats stopped
  // this long as lost (its failure ends the attempt), and the others watch
  // the first node's beats the same way.
  double heartbeat_timeout_seconds = 30;
  // --stall-timeout: the watchdog's (watchdog.h); 0: no watchdog.
  double stall_timeout_seconds = 0;
  // The attempt's watch folder, DIST_ENGINE_WATCH_DIR (set by the supervisor).
  std::string watch_dir;
  // This node's snapshot folder for the job, DIST_ENGINE_SNAPSHOT_DIR (set
  // by the supervisor).
  std::string snapshot_dir;
  // The LibTorch (MAJOR.MINOR) of the launchers, whose c10d store the ranks
  // join, as DIST_ENGINE_STORE_LIBTORCH (set by the supervisor).
  std::string store_libtorch;
  std::vector<std::string> command;
};

// Parses engine-launch's arguments (torchrun's names). Throws
// std::invalid_argument with a usage message for anything wrong.
Plan parse_plan(const std::vector<std::string>& args);

// torchrun's variables for local rank `local_rank` of this node, with
// TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS and
// TORCHELASTIC_USE_AGENT_STORE=True: the ranks join the job's store at MASTER_ADDR:MASTER_PORT,
// under the attempt's prefix; with a watch folder, DIST_ENGINE_WATCH_DIR; with a snapshot folder,
// DIST_ENGINE_SNAPSHOT_DIR; with the store's LibTorch,
// DIST_ENGINE_STORE_LIBTORCH.
std::map<std::string, std::string> rank_environment(const Plan& plan, int local_rank);

// `text` as a TCP port number (1-65535), or nullopt when it is not one.
std::optional<int> port_number(const std::string& text);

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick).
int free_port();

}  // namespace launch
