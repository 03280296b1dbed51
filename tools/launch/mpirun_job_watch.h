#pragma once

#include <optional>
#include <string>

#include "tools/launch/job_store.h"
#include "tools/launch/job_watch.h"
#include "tools/launch/launch_plan.h"
#include "tools/launch/watchdog.h"

namespace launch {

// engine-watch --job-store HOST:PORT: the job-wide watch (job_watch.h) for
// ranks that mpirun starts over several nodes. The engine-watch of each
// node's local rank 0 stands for its node, as engine-launch's launcher
// does: the one of global rank 0 is node 0 and hosts the job's store on
// PORT (HOST is its node's address, which the others reach); the others
// take the numbers 1, 2, ... in the order they reach it. Every node counts
// its ranks in the store, so the nodes know how many they are once every
// rank of the job is counted, without a flag naming them.
class MpirunJobWatch {
 public:
  // Joins the job's watch: blocks until every node did (at most the
  // launcher's join timeout, then std::runtime_error naming what is
  // missing). `address`: "HOST:PORT" (std::invalid_argument otherwise).
  MpirunJobWatch(const std::string& address, int rank, int local_size, int world_size);
  MpirunJobWatch(const MpirunJobWatch&) = delete;
  MpirunJobWatch& operator=(const MpirunJobWatch&) = delete;

  // Called every monitor interval once this node's `watchdog` exists (the
  // same one each time). On node 0: the text of the job's stall once it
  // happened, every node's records diagnosed; elsewhere nullopt (this
  // node's records go to node 0 once it declared the stall). Throws
  // std::runtime_error when the store cannot be reached.
  std::optional<std::string> check(Watchdog& watchdog);

  // After this node's ranks succeeded: node 0, whose store the others use,
  // waits (at most a minute) until every node has left.
  void leave() { store_.leave(); }

 private:
  Plan plan_;  // before store_, which reads it
  JobStore store_;
  std::optional<JobWatch> watch_;
};

}  // namespace launch
