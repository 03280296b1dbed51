#include "tools/launch/job_store.h"

#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace launch {
namespace {

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::string text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

std::string encode(const Failure& failure) {
  return std::to_string(failure.node) + " " + std::to_string(failure.status) + " " +
         (failure.interrupted ? "1" : "0") + " " + (failure.silent ? "1" : "0");
}

Failure decode(const std::string& encoded) {
  Failure failure;
  std::istringstream in(encoded);
  in >> failure.node >> failure.status >> failure.interrupted >> failure.silent;
  return failure;
}

std::string this_launcher() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return "pid " + std::to_string(getpid()) + " on " + host;
}

constexpr auto kLeaveTimeout = std::chrono::minutes(1);

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

std::string JobStore::libtorch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}

JobStore::JobStore(const Plan& plan) : plan_(plan) {
  // LibTorch 1.x's own server stops for everyone while one client's request
  // is half-arrived; 2.x's serves each client on its own.
  constexpr bool kOwnServer = TORCH_VERSION_MAJOR < 2;
  const bool hosting = hosts(plan);
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(plan.master_port);
  options.isServer = hosting && !kOwnServer;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(plan.join_timeout_seconds);
  try {
    if (hosting && kOwnServer) server_ = std::make_unique<StoreServer>(plan.master_port);
    store_ = c10::make_intrusive<c10d::TCPStore>(plan.master_addr, options);
  } catch (const std::exception& e) {
    throw std::runtime_error(
        hosting ? "cannot host the job's store on port " + std::to_string(plan.master_port) + ": " +
                      e.what()
                : "cannot reach the job's store (" +
                      std::string(plan.external_store ? "engine-store" : "node 0's launcher") +
                      ") at " + plan.master_addr + ":" + std::to_string(plan.master_port) +
                      " within " + std::to_string(plan.join_timeout_seconds) + " s: " + e.what());
  }
}

bool JobStore::hosts(const Plan& plan) { return plan.node_rank == 0 && !plan.external_store; }

std::string JobStore::key(int attempt, const std::string& name) const {
  return "engine-launch/attempt_" + std::to_string(attempt) + "/" + name;
}

std::vector<int> JobStore::join(int attempt) {
  const std::string mine = key(attempt, "node_" + std::to_string(plan_.node_rank));
  const std::string me = this_launcher();
  const std::string holder = text(store_->compareSet(mine, {}, bytes(me)));
  if (holder != me) {
    throw std::runtime_error("node " + std::to_string(plan_.node_rank) +
                             " already joined attempt " + std::to_string(attempt) +
                             " of this job (launcher " + holder +
                             "); a launcher cannot rejoin an attempt it left: start the whole "
                             "job again, or let --max-restarts restart it");
  }
  const int64_t joined = store_->add(key(attempt, "joined"), 1);
  if (joined == plan_.min_nodes) store_->set(key(attempt, "enough_joined"), bytes("1"));
  if (joined == plan_.nnodes) store_->set(key(attempt, "all_joined"), bytes("1"));
  // Every node decides when the attempt starts, and the first list written
  // is the attempt's: no node's loss, node 0's included, stops the others.
  std::string list;
  for (const int node : start(attempt)) list += std::to_string(node) + " ";
  const std::string nodes = text(store_->compareSet(key(attempt, "nodes"), {}, bytes(list)));
  attempt_ = attempt;
  beats_.clear();
  members_.clear();
  std::istringstream in(nodes);
  for (int node; in >> node;) members_.push_back(node);
  if (std::find(members_.begin(), members_.end(), plan_.node_rank) == members_.end()) {
    throw std::runtime_error("node " + std::to_string(plan_.node_rank) + " joined attempt " +
                             std::to_string(attempt) + " after it started without it");
  }
  return members_;
}

std::vector<int> JobStore::start(int attempt) {
  const auto join_timeout = std::chrono::seconds(plan_.join_timeout_seconds);
  try {
    store_->wait({key(attempt, "enough_joined")}, join_timeout);
  } catch (const std::exception&) {
    throw std::runtime_error("attempt " + std::to_string(attempt) + ": " + nodes_missing(attempt) +
                             " within " + std::to_string(plan_.join_timeout_seconds) +
                             " s (--join-timeout)");
  }
  if (plan_.min_nodes < plan_.nnodes) {
    try {
      store_->wait({key(attempt, "all_joined")}, millis(plan_.last_call_seconds));
    } catch (const std::exception&) {
      std::fprintf(stderr,
                   "engine-launch: attempt %d starts without the nodes that did not join (%s "
                   "within the last call, --last-call)\n",
                   attempt, nodes_missing(attempt).c_str());
    }
  }
  return joined_nodes(attempt);
}

std::vector<int> JobStore::joined_nodes(int attempt) const {
  std::vector<int> nodes;
  for (int node = 0; node < plan_.nnodes; ++node) {
    if (store_->check({key(attempt, "node_" + std::to_string(node))})) nodes.push_back(node);
  }
  return nodes;
}

std::string JobStore::nodes_missing(int attempt) const {
  const std::vector<int> joined = joined_nodes(attempt);
  std::string missing;
  for (int node = 0; node < plan_.nnodes; ++node) {
    if (std::find(joined.begin(), joined.end(), node) == joined.end())
      missing += (missing.empty() ? "" : ", ") + std::to_string(node);
  }
  return "node(s) " + missing + " did not join";
}

void JobStore::keep_alive(int attempt) {
  store_->add(key(attempt, "beats_" + std::to_string(plan_.node_rank)), 1);
  const auto now = std::chrono::steady_clock::now();
  const auto timeout = millis(plan_.heartbeat_timeout_seconds);
  // The first node watches every other; they watch it.
  const int first = members_.front();
  for (const int node : members_) {
    if (node == plan_.node_rank || (plan_.node_rank != first && node != first)) continue;
    const int64_t count = store_->add(key(attempt, "beats_" + std::to_string(node)), 0);
    const auto seen = beats_.find(node);
    if (seen == beats_.end() || seen->second.first != count) {
      beats_[node] = {count, now};
    } else if (now - seen->second.second >= timeout) {
      report_failure(attempt, {node, 1, false, true});
      return;
    }
  }
}

std::optional<Failure> JobStore::failure(int attempt) {
  const std::string failed = key(attempt, "failure");
  if (!store_->check({failed})) return std::nullopt;
  return decode(text(store_->get(failed)));
}

// Wakes the nodes waiting in report_success.
void JobStore::end(int attempt) { store_->set(key(attempt, "ended"), bytes("1")); }

Failure JobStore::report_failure(int attempt, const Failure& failure) {
  const Failure first =
      decode(text(store_->compareSet(key(attempt, "failure"), {}, bytes(encode(failure)))));
  end(attempt);
  return first;
}

std::optional<Failure> JobStore::report_success(int attempt) {
  if (store_->add(key(attempt, "succeeded"), 1) == static_cast<int64_t>(members_.size()))
    end(attempt);
  const auto interval = millis(plan_.monitor_interval_seconds);
  while (!store_->check({key(attempt, "ended")})) {
    std::this_thread::sleep_for(interval);
    keep_alive(attempt);
  }
  return failure(attempt);
}

void JobStore::set(int attempt, const std::string& name, const std::string& value) {
  store_->set(key(attempt, name), bytes(value));
}

std::optional<std::string> JobStore::get(int attempt, const std::string& name) {
  const std::string stored = key(attempt, name);
  if (!store_->check({stored})) return std::nullopt;
  return text(store_->get(stored));
}

int64_t JobStore::add(int attempt, const std::string& name, int64_t amount) {
  return store_->add(key(attempt, name), amount);
}

void JobStore::leave() {
  // A node that went silent will not leave.
  const auto ended_by = failure(attempt_);
  const auto leaving =
      static_cast<int64_t>(members_.size()) - (ended_by && ended_by->silent ? 1 : 0);
  if (store_->add(key(attempt_, "left"), 1) == leaving) {
    store_->set(key(attempt_, "all_left"), bytes("1"));
  }
  if (!hosts(plan_)) return;
  try {
    store_->wait({key(attempt_, "all_left")}, kLeaveTimeout);
  } catch (const std::exception&) {
    std::fprintf(stderr,
                 "engine-launch: not every node's launcher left within a minute; "
                 "closing the job's store anyway\n");
  }
}

}  // namespace launch
