#include "tools/launch/mpirun_job_watch.h"

#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>

namespace launch {
namespace {

// The attempt that mpirun's one run of the job is, in the store's keys.
constexpr int kOnlyAttempt = 0;
constexpr const char* kNumberedNodes = "mpirun_numbered_nodes";
constexpr const char* kCountedRanks = "mpirun_counted_ranks";

Plan plan_of(const std::string& address, int rank) {
  const size_t colon = address.rfind(':');
  const std::optional<int> port = colon == std::string::npos || colon == 0
                                      ? std::nullopt
                                      : port_number(address.substr(colon + 1));
  if (!port) {
    throw std::invalid_argument(
        "--job-store needs HOST:PORT (global rank 0's host, a free port there), got \"" + address +
        "\"");
  }
  Plan plan;
  plan.master_port = *port;
  plan.master_addr = address.substr(0, colon);
  // Only global rank 0's node hosts the store; the others' numbers come later.
  plan.node_rank = rank == 0 ? 0 : 1;
  return plan;
}

}  // namespace

MpirunJobWatch::MpirunJobWatch(const std::string& address, int rank, int local_size, int world_size)
    : plan_(plan_of(address, rank)), store_(plan_) {
  if (rank != 0) plan_.node_rank = static_cast<int>(store_.add(kOnlyAttempt, kNumberedNodes, 1));
  int64_t counted = store_.add(kOnlyAttempt, kCountedRanks, local_size);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(plan_.join_timeout_seconds);
  while (counted < world_size) {
    if (std::chrono::steady_clock::now() >= deadline) {
      throw std::runtime_error("the nodes of " + std::to_string(counted) + " of the job's " +
                               std::to_string(world_size) + " ranks joined its watch within " +
                               std::to_string(plan_.join_timeout_seconds) +
                               " s: is every rank started through engine-watch --job-store?");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    counted = store_.add(kOnlyAttempt, kCountedRanks, 0);
  }
  plan_.nnodes = plan_.min_nodes =
      1 + static_cast<int>(store_.add(kOnlyAttempt, kNumberedNodes, 0));
  store_.join(kOnlyAttempt);
}

std::optional<std::string> MpirunJobWatch::check(Watchdog& watchdog) {
  if (!watch_) watch_.emplace(store_, watchdog, plan_);
  return watch_->check();
}

}  // namespace launch
