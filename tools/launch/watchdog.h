#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/flight/watch.h"
#include "tools/launch/launch_plan.h"
#include "tools/launch/temporary_folder.h"

namespace launch {

// engine-launch --stall-timeout: this node's ranks have stalled when, for
// that long, none of them started or ended a call (the counters each rank
// keeps where its launcher can read them, engine/flight/watch.h) while at
// least one is inside a call. A rank that computes for longer than that
// between calls is not stalled; one that waits that long in a call for a
// rank that computes is, so the timeout must exceed the longest such wait.
// On a stall the watchdog asks every rank for its flight record, prints the
// diagnosis (engine/flight/diagnosis.h: who waits in which call for whom),
// and keeps the records in the attempt's folder.
class Watchdog {
 public:
  // `ranks`: this node's, as global ranks. `dir`: the folder given to the
  // ranks as DIST_ENGINE_WATCH_DIR. `tool` starts every line it prints.
  Watchdog(std::vector<int> ranks, double stall_timeout_seconds, std::string dir, std::string tool);
  // engine-launch's: this node's ranks in the plan's attempt (numbered in
  // the order of the nodes that run it) and --stall-timeout.
  Watchdog(const Plan& plan, std::string dir);

  // Called every monitor interval: the text of the stall once it happened.
  std::optional<std::string> stalled();

  // For the job-wide watch over several nodes (job_watch.h):
  // This node's ranks' progress in one line, "<calls begun> <calls ended>
  // <ranks in a call>" summed over them.
  std::string summary() const;
  // Asks this node's ranks for their flight records and waits (at most 10
  // s) until they are written: each rank's record's text.
  std::map<int, std::string> records();
  // Prints the diagnosis of this node's records (asked for first) and of
  // `others` (rank -> a record's text, written into the folder beside
  // them), and where they are.
  void diagnose(const std::map<int, std::string>& others = {});
  const std::string& tool() const { return tool_; }
  double stall_timeout_seconds() const { return stall_timeout_seconds_; }

 private:
  // Asks the ranks for their records and waits for them: their paths.
  std::vector<std::string> request_records();

  const std::vector<int> ranks_;
  const double stall_timeout_seconds_;
  const std::string dir_;
  const std::string tool_;
  std::vector<std::optional<engine::flight::Progress>> seen_;
  std::chrono::steady_clock::time_point last_change_;
};

// The folder under $TMPDIR (else /tmp) that holds every attempt's watch
// folder; removed with everything in it when destroyed, unless kept.
class WatchFolders {
 public:
  WatchFolders() : root_(temporary_parent(), "the watchdog") {}
  std::string attempt(int attempt);  // made on first use
  void keep() { root_.keep(); }

 private:
  TemporaryFolder root_;
};

}  // namespace launch
