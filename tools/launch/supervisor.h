#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tools/launch/launch_plan.h"

namespace launch {

// Starts every local rank of `plan` with torchrun's variables, relays their
// output line by line prefixed with "[rank R] ", and returns the job's exit
// status: 0 when every rank exited 0; otherwise the first failing rank's
// (its exit code, or 128 + the signal that ended it), after the others were
// stopped: SIGTERM, then SIGKILL once plan.grace_seconds passed. SIGINT and
// SIGTERM sent to the launcher are forwarded to every rank (and end the job
// the same way). Waits block in poll(); nothing spins. When the ranks have
// ended, whatever they left running is killed: what remains of each rank's
// process group, and the descendants that left it (the launcher is their
// subreaper, so they come to it when their parents end).
// With `checks`, it also runs each check every checks->interval while
// ranks run, and the first that returns a Stop stops this node's ranks the
// same way, with its status: another node's failure, the watchdog.
struct Stop {
  int status = 0;
  std::string what;   // for the log
  bool peer = false;  // another node's failure, already reported
};
struct Checks {
  std::chrono::milliseconds interval;
  std::vector<std::function<std::optional<Stop>()>> checks;
};
struct Outcome {
  int status = 0;
  bool interrupted = false;  // the launcher was sent SIGINT or SIGTERM
  bool peer_failed = false;  // stopped for another node's failure
};
Outcome supervise(const Plan& plan, const Checks* checks = nullptr);

// supervise, again after a failure while plan.max_restarts allow, each
// attempt with its TORCHELASTIC_RESTART_COUNT. The launchers agree on each
// attempt through the job's store, which node 0's launcher hosts unless
// engine-store does (job_store.h; the port is picked on one node unless given), whose keys the
// ranks of attempt k see under their own prefix; a failure on any node stops and restarts every
// node's ranks, once for all of them. The store listens before any rank starts, so no rank waits
// out c10d's one-second retry for a store that is not up yet. Every attempt's ranks on a node share
// one snapshot folder in memory (DIST_ENGINE_SNAPSHOT_DIR, engine/snapshot/snapshots.h), removed
// when the job ends. A job stopped by a signal to a launcher is not restarted. With
// plan.stall_timeout_seconds, each attempt's ranks are watched (watchdog.h), and a stall is a
// failure with status 124 (as timeout(1) exits). Returns the last attempt's status (with several
// nodes, the status of the rank that failed first).
int supervise_with_restarts(Plan plan);

}  // namespace launch
