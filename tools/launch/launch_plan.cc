#include "tools/launch/launch_plan.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace launch {
namespace {

const char* kUsage =
    "usage: engine-launch [--nproc-per-node N] [--nnodes N|MIN:MAX] [--node-rank R]\n"
    "                     [--master-addr HOST] [--master-port PORT] [--store node0|external]\n"
    "                     [--grace-seconds S]\n"
    "                     [--max-restarts N] [--join-timeout S] [--last-call S]\n"
    "                     [--monitor-interval S] [--heartbeat-timeout S] [--stall-timeout S]\n"
    "                     [--] PROGRAM [ARGS...]";

// `value` as a Number in [low, high] (a whole number, or seconds), or
// nullopt when it is not one.
template <typename Number>
std::optional<Number> parsed_in(const std::string& value, Number low, Number high) {
  size_t used = 0;
  Number n{};
  try {
    if constexpr (std::is_integral_v<Number>) {
      n = std::stoi(value, &used);
    } else {
      n = std::stod(value, &used);
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != value.size() || !(n >= low && n <= high)) return std::nullopt;
  return n;
}

// parsed_in, or the usage with what `flag` expected.
template <typename Number>
Number number_in(const std::string& flag, const std::string& value, Number low, Number high) {
  if (const auto n = parsed_in(value, low, high)) return *n;
  std::ostringstream range;
  range << (std::is_integral_v<Number> ? "a whole number" : "seconds") << " in [" << low << ", "
        << high << "]";
  throw std::invalid_argument(flag + " " + value + ": expected " + range.str() + "\n" + kUsage);
}

// --nnodes N or MIN:MAX.
void parse_nodes(const std::string& value, Plan& plan) {
  const size_t colon = value.find(':');
  if (colon == std::string::npos) {
    plan.nnodes = plan.min_nodes = number_in("--nnodes", value, 1, 100000);
    return;
  }
  plan.min_nodes = number_in("--nnodes", value.substr(0, colon), 1, 100000);
  plan.nnodes = number_in("--nnodes", value.substr(colon + 1), 1, 100000);
  if (plan.min_nodes > plan.nnodes) {
    throw std::invalid_argument("--nnodes " + value + ": MIN must not exceed MAX\n" + kUsage);
  }
}

// --store node0 or external.
bool store_is_external(const std::string& value) {
  if (value != "node0" && value != "external") {
    throw std::invalid_argument("--store " + value +
                                ": expected node0 (node 0's launcher hosts the job's store) or "
                                "external (engine-store hosts it)\n" +
                                kUsage);
  }
  return value == "external";
}

}  // namespace

Plan parse_plan(const std::vector<std::string>& args) {
  Plan plan;
  size_t i = 0;
  for (; i < args.size() && args[i].rfind("--", 0) == 0; ++i) {
    const std::string& flag = args[i];
    if (flag == "--") {
      ++i;
      break;
    }
    if (i + 1 >= args.size()) throw std::invalid_argument(flag + " needs a value\n" + kUsage);
    const std::string& value = args[++i];
    if (flag == "--nproc-per-node")
      plan.nproc_per_node = number_in(flag, value, 1, 1024);
    else if (flag == "--nnodes")
      parse_nodes(value, plan);
    else if (flag == "--node-rank")
      plan.node_rank = number_in(flag, value, 0, 99999);
    else if (flag == "--master-addr")
      plan.master_addr = value;
    else if (flag == "--master-port")
      plan.master_port = number_in(flag, value, 1, 65535);
    else if (flag == "--store")
      plan.external_store = store_is_external(value);
    else if (flag == "--grace-seconds")
      plan.grace_seconds = number_in(flag, value, 0, 3600);
    else if (flag == "--max-restarts")
      plan.max_restarts = number_in(flag, value, 0, 1000);
    else if (flag == "--last-call")
      plan.last_call_seconds = number_in(flag, value, 0.0, 86400.0);
    else if (flag == "--join-timeout")
      plan.join_timeout_seconds = number_in(flag, value, 1, 86400);
    else if (flag == "--monitor-interval")
      plan.monitor_interval_seconds = number_in(flag, value, 0.01, 60.0);
    else if (flag == "--heartbeat-timeout")
      plan.heartbeat_timeout_seconds = number_in(flag, value, 0.1, 86400.0);
    else if (flag == "--stall-timeout")
      plan.stall_timeout_seconds = number_in(flag, value, 0.0, 86400.0);
    else
      throw std::invalid_argument("unknown flag " + flag + "\n" + kUsage);
  }
  plan.command.assign(args.begin() + static_cast<long>(i), args.end());
  if (plan.command.empty())
    throw std::invalid_argument(std::string("no program to run\n") + kUsage);
  if (plan.node_rank >= plan.nnodes) {
    throw std::invalid_argument("--node-rank " + std::to_string(plan.node_rank) +
                                " must be below --nnodes " + std::to_string(plan.nnodes));
  }
  plan.attempt_nodes = plan.nnodes;
  plan.attempt_node_rank = plan.node_rank;
  if (plan.nnodes > 1 && plan.master_port == 0) {
    throw std::invalid_argument(
        "--master-port is needed with --nnodes > 1: every node must use the same one");
  }
  if (plan.external_store && plan.master_port == 0) {
    throw std::invalid_argument(
        "--master-port is needed with --store external: the port engine-store listens on");
  }
  return plan;
}

std::map<std::string, std::string> rank_environment(const Plan& plan, int local_rank) {
  std::map<std::string, std::string> env = {
      {"RANK", std::to_string(plan.attempt_node_rank * plan.nproc_per_node + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(plan.attempt_nodes * plan.nproc_per_node)},
      {"LOCAL_WORLD_SIZE", std::to_string(plan.nproc_per_node)},
      {"GROUP_RANK", std::to_string(plan.attempt_node_rank)},
      {"MASTER_ADDR", plan.master_addr},
      {"MASTER_PORT", std::to_string(plan.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(plan.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(plan.max_restarts)},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  if (!plan.watch_dir.empty()) env["DIST_ENGINE_WATCH_DIR"] = plan.watch_dir;
  if (!plan.snapshot_dir.empty()) env["DIST_ENGINE_SNAPSHOT_DIR"] = plan.snapshot_dir;
  if (!plan.store_libtorch.empty()) env["DIST_ENGINE_STORE_LIBTORCH"] = plan.store_libtorch;
  return env;
}

std::optional<int> port_number(const std::string& text) { return parsed_in(text, 1, 65535); }

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("engine-launch: cannot open a socket to pick a port");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  if (!ok) throw std::runtime_error("engine-launch: cannot pick a free port: pass --master-port");
  return ntohs(address.sin_port);
}

}  // namespace launch
