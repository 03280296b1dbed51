#include "tools/launch/job_store.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace launch {
namespace {

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::string text(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

std::string encode(const Failure& failure) {
  return std::to_string(failure.node) + " " + std::to_string(failure.status) + " " +
         (failure.interrupted ? "1" : "0");
}

Failure decode(const std::string& encoded) {
  Failure failure;
  std::istringstream in(encoded);
  in >> failure.node >> failure.status >> failure.interrupted;
  return failure;
}

std::string this_launcher() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return "pid " + std::to_string(getpid()) + " on " + host;
}

constexpr auto kLeaveTimeout = std::chrono::minutes(1);

}  // namespace

JobStore::JobStore(const Plan& plan) : plan_(plan) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(plan.master_port);
  options.isServer = plan.node_rank == 0;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(plan.join_timeout_seconds);
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(plan.master_addr, options);
  } catch (const std::exception& e) {
    throw std::runtime_error(
        (plan.node_rank == 0 ? "cannot host the job's store on port "
                             : "cannot reach the job's store (node 0's launcher) at ") +
        (plan.node_rank == 0 ? "" : plan.master_addr + ":") + std::to_string(plan.master_port) +
        " within " + std::to_string(plan.join_timeout_seconds) + " s: " + e.what());
  }
}

std::string JobStore::key(int attempt, const std::string& name) const {
  return "engine-launch/attempt_" + std::to_string(attempt) + "/" + name;
}

void JobStore::join(int attempt) {
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
  if (store_->add(key(attempt, "joined"), 1) == plan_.nnodes) {
    store_->set(key(attempt, "all_joined"), bytes("1"));
  }
  try {
    store_->wait({key(attempt, "all_joined")}, std::chrono::seconds(plan_.join_timeout_seconds));
  } catch (const std::exception&) {
    std::string missing;
    for (int node = 0; node < plan_.nnodes; ++node) {
      if (!store_->check({key(attempt, "node_" + std::to_string(node))}))
        missing += (missing.empty() ? "" : ", ") + std::to_string(node);
    }
    throw std::runtime_error("attempt " + std::to_string(attempt) + ": node(s) " + missing +
                             " did not join within " + std::to_string(plan_.join_timeout_seconds) +
                             " s (--join-timeout)");
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
  if (store_->add(key(attempt, "succeeded"), 1) == plan_.nnodes) end(attempt);
  store_->wait({key(attempt, "ended")}, c10d::Store::kNoTimeout);
  return failure(attempt);
}

void JobStore::leave() {
  if (store_->add("engine-launch/left", 1) == plan_.nnodes) {
    store_->set("engine-launch/all_left", bytes("1"));
  }
  if (plan_.node_rank != 0) return;
  try {
    store_->wait({"engine-launch/all_left"}, kLeaveTimeout);
  } catch (const std::exception&) {
    std::fprintf(stderr,
                 "engine-launch: not every node's launcher left within a minute; "
                 "closing the job's store anyway\n");
  }
}

}  // namespace launch
