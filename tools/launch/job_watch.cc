#include "tools/launch/job_watch.h"

#include <cstdio>
#include <sstream>
#include <thread>

namespace launch {
namespace {

using Clock = std::chrono::steady_clock;

// How long the deciding node waits for the other nodes' records.
constexpr auto kRecordsWait = std::chrono::seconds(20);

std::string progress_key(int node) { return "watch_progress_" + std::to_string(node); }
std::string records_key(int node) { return "watch_records_" + std::to_string(node); }
std::string record_key(int rank) { return "watch_record_" + std::to_string(rank); }
constexpr const char* kStallKey = "watch_stall";

// A summary's third field: how many of the node's ranks are in a call.
bool in_a_call(const std::string& summary) {
  std::istringstream in(summary);
  uint64_t begun = 0, ended = 0;
  int calling = 0;
  in >> begun >> ended >> calling;
  return calling > 0;
}

}  // namespace

JobWatch::JobWatch(JobStore& store, Watchdog& watchdog, const Plan& plan)
    : store_(store),
      watchdog_(watchdog),
      node_(plan.node_rank),
      attempt_(plan.restart_count),
      last_change_(Clock::now()) {}

std::optional<std::string> JobWatch::check() {
  const int decider = store_.members().front();
  if (node_ == decider) return decide();
  // Once the records are sent, the decider may end the job, and the store
  // that its node hosts with it.
  if (sent_) return std::nullopt;
  store_.set(attempt_, progress_key(node_), watchdog_.summary());
  if (!store_.get(attempt_, kStallKey)) return std::nullopt;
  std::string ranks;
  for (const auto& [rank, text] : watchdog_.records()) {
    store_.set(attempt_, record_key(rank), text);
    ranks += std::to_string(rank) + " ";
  }
  store_.set(attempt_, records_key(node_), ranks);
  std::fprintf(stderr, "%s: node %d found the job stalled; sent it this node's flight records\n",
               watchdog_.tool().c_str(), decider);
  sent_ = true;
  return std::nullopt;
}

std::optional<std::string> JobWatch::decide() {
  std::map<int, std::string> now;
  for (const int node : store_.members()) {
    now[node] =
        node == node_ ? watchdog_.summary() : store_.get(attempt_, progress_key(node)).value_or("");
  }
  if (now != seen_) last_change_ = Clock::now();
  seen_ = now;
  bool calling = false;
  for (const auto& [node, summary] : now) calling |= in_a_call(summary);
  const double timeout = watchdog_.stall_timeout_seconds();
  if (!calling || Clock::now() - last_change_ < std::chrono::duration<double>(timeout)) {
    return std::nullopt;
  }
  std::fprintf(stderr,
               "%s: no rank of the job started or ended a call for %g s while one was in a call "
               "(--stall-timeout); asking every node's ranks for their flight records\n",
               watchdog_.tool().c_str(), timeout);
  store_.set(attempt_, kStallKey, "1");
  watchdog_.diagnose(others_records());
  return "the job's ranks stalled";
}

std::map<int, std::string> JobWatch::others_records() {
  std::map<int, std::string> out;
  const auto deadline = Clock::now() + kRecordsWait;
  for (const int node : store_.members()) {
    if (node == node_) continue;
    std::optional<std::string> ranks;
    while (!(ranks = store_.get(attempt_, records_key(node))) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!ranks) {
      std::fprintf(stderr, "%s: node %d sent no flight records\n", watchdog_.tool().c_str(), node);
      continue;
    }
    std::istringstream in(*ranks);
    for (int rank; in >> rank;) out[rank] = store_.get(attempt_, record_key(rank)).value_or("");
  }
  return out;
}

}  // namespace launch
