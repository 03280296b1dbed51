#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "tools/launch/job_store.h"
#include "tools/launch/launch_plan.h"
#include "tools/launch/watchdog.h"

namespace launch {

// engine-launch --stall-timeout over several nodes: the job has stalled
// when, for that long, no rank of any node started or ended a call while
// one was in a call. Each node's launcher publishes its ranks' progress
// (Watchdog::summary) in the job's store every monitor interval; the
// attempt's first node's (node 0's unless it was lost) decides. On a stall
// it asks every node for its ranks' flight records
// through the store, prints one diagnosis of every rank of the job, and
// ends the attempt (status 124, which --max-restarts restarts); the other
// nodes stop as on any failure.
class JobWatch {
 public:
  // `watchdog` watches this node's ranks; both must outlive this.
  JobWatch(JobStore& store, Watchdog& watchdog, const Plan& plan);

  // Called every monitor interval during the attempt. On the deciding node:
  // the text of the stall once it happened, its diagnosis printed.
  // Elsewhere always nullopt; the node's records go to the decider once it
  // declared the stall.
  std::optional<std::string> check();

 private:
  std::optional<std::string> decide();
  std::map<int, std::string> others_records();

  JobStore& store_;
  Watchdog& watchdog_;
  const int node_;
  const int attempt_;
  std::map<int, std::string> seen_;  // node -> its last summary
  std::chrono::steady_clock::time_point last_change_;
  bool sent_ = false;
};

}  // namespace launch
