#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "tools/launch/launch_plan.h"
#include "tools/launch/store_server.h"

namespace launch {

// How an attempt of a job over several nodes ended, for all of them.
struct Failure {
  int node = 0;              // the node whose rank failed first
  int status = 0;            // that rank's exit status: every node's
  bool interrupted = false;  // its launcher was sent SIGINT or SIGTERM: no restart
  bool silent = false;       // its launcher's heartbeats stopped (status 1)
};

// What the launchers of a job's nodes agree on, through a c10d TCPStore at
// MASTER_ADDR:MASTER_PORT (torchrun's agent store; the ranks of attempt k
// join it under "/worker/attempt_k"): that every node runs the same
// attempt, and how each attempt ended. So a job restarts at most
// --max-restarts times however many nodes see a failure. Node 0's launcher
// hosts the store, or with --store external engine-store does (store_main.cc),
// and then the job can lose node 0 like any other: no decision waits for a
// particular node. Built against LibTorch 1.x, the server is StoreServer,
// which a node cut off mid-request cannot stop.
// Every call but failure() blocks; each throws std::runtime_error when the
// store cannot be reached or a wait outlives its bound.
class JobStore {
 public:
  // Node 0 hosts the store unless it is external; the others connect to
  // it, retrying for up to plan.join_timeout_seconds (the launchers and
  // engine-store may start in any order).
  explicit JobStore(const Plan& plan);

  // The LibTorch whose store protocol this launcher speaks, "MAJOR.MINOR".
  static std::string libtorch_version();

  // Joins `attempt` and returns the nodes that run it, in order. It starts
  // once every node joined, or once plan.min_nodes did and the others have
  // not within plan.last_call_seconds (the wait for min_nodes at most
  // plan.join_timeout_seconds, then an error naming the nodes that did not
  // come); each node decides so, and the first list written holds. A node that joins an attempt
  // started without it, or one its node already joined (a launcher started again: so a node cannot
  // escape --max-restarts by leaving and coming back), is refused.
  std::vector<int> join(int attempt);

  // Every launcher calls it each monitor interval while `attempt` runs:
  // says this launcher is alive, and reports a node whose beats stopped for
  // plan.heartbeat_timeout_seconds as its failure (silent; the attempt's
  // first unless another came before). The attempt's first node watches
  // every other, and they watch it. Returns at once.
  void keep_alive(int attempt);

  // The failure that ended `attempt`, if one was reported; returns at once.
  std::optional<Failure> failure(int attempt);

  // Reports this node's failure. The first report of an attempt ends it;
  // returns that one (another node's, when it came first).
  Failure report_failure(int attempt, const Failure& failure);

  // Reports that this node's ranks succeeded, then waits until those of
  // every node of the attempt did (nullopt) or one failed (its failure),
  // beating and watching beats meanwhile (so that the wait ends when a node
  // is lost).
  std::optional<Failure> report_success(int attempt);

  // Before the launcher exits after its last attempt: node 0, when it hosts
  // the store the others use, waits (at most a minute) until every node of
  // that attempt has left.
  void leave();

  // What else the launchers share during `attempt` (job_watch.h): a value
  // under `name`, and that value if one was set. Return at once.
  void set(int attempt, const std::string& name, const std::string& value);
  std::optional<std::string> get(int attempt, const std::string& name);
  // Adds `amount` to the counter `name` (0 when never set): its new value.
  int64_t add(int attempt, const std::string& name, int64_t amount);
  // The nodes that run the attempt joined last.
  const std::vector<int>& members() const { return members_; }

 private:
  // Whether this launcher hosts the store: node 0's, unless it is external.
  static bool hosts(const Plan& plan);
  std::string key(int attempt, const std::string& name) const;
  // Which nodes run `attempt`, once enough joined.
  std::vector<int> start(int attempt);
  std::vector<int> joined_nodes(int attempt) const;
  std::string nodes_missing(int attempt) const;
  void end(int attempt);

  const Plan& plan_;
  int attempt_ = 0;
  std::vector<int> members_;
  // The nodes this one watches: each one's last beat count, and when it changed.
  std::map<int, std::pair<int64_t, std::chrono::steady_clock::time_point>> beats_;
  // The host's under LibTorch 1.x; outlives store_, its own client.
  std::unique_ptr<StoreServer> server_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace launch
