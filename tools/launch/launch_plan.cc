#include "tools/launch/launch_plan.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace launch {
namespace {

const char* kUsage =
    "usage: engine-launch [--nproc-per-node N] [--nnodes N] [--node-rank R] [--master-addr HOST]\n"
    "                     [--master-port PORT] [--grace-seconds S] [--max-restarts N]\n"
    "                     [--] PROGRAM [ARGS...]";

int whole_number(const std::string& flag, const std::string& value, int low, int high) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty() || n < low || n > high) {
    throw std::invalid_argument(flag + " " + value + ": expected a whole number in [" +
                                std::to_string(low) + ", " + std::to_string(high) + "]\n" + kUsage);
  }
  return n;
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
      plan.nproc_per_node = whole_number(flag, value, 1, 1024);
    else if (flag == "--nnodes")
      plan.nnodes = whole_number(flag, value, 1, 100000);
    else if (flag == "--node-rank")
      plan.node_rank = whole_number(flag, value, 0, 99999);
    else if (flag == "--master-addr")
      plan.master_addr = value;
    else if (flag == "--master-port")
      plan.master_port = whole_number(flag, value, 1, 65535);
    else if (flag == "--grace-seconds")
      plan.grace_seconds = whole_number(flag, value, 0, 3600);
    else if (flag == "--max-restarts")
      plan.max_restarts = whole_number(flag, value, 0, 1000);
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
  if (plan.nnodes > 1 && plan.master_port == 0) {
    throw std::invalid_argument(
        "--master-port is needed with --nnodes > 1: every node must use the same one");
  }
  if (plan.nnodes > 1 && plan.max_restarts > 0) {
    throw std::invalid_argument(
        "--max-restarts with --nnodes > 1 is not supported yet: the nodes' launchers do not "
        "agree on restarts, so a failure on one node would not restart the others (issue 48); "
        "restart the whole job from outside, with resume_from \"auto\"");
  }
  return plan;
}

std::map<std::string, std::string> rank_environment(const Plan& plan, int local_rank) {
  return {{"RANK", std::to_string(plan.node_rank * plan.nproc_per_node + local_rank)},
          {"LOCAL_RANK", std::to_string(local_rank)},
          {"WORLD_SIZE", std::to_string(plan.nnodes * plan.nproc_per_node)},
          {"LOCAL_WORLD_SIZE", std::to_string(plan.nproc_per_node)},
          {"GROUP_RANK", std::to_string(plan.node_rank)},
          {"MASTER_ADDR", plan.master_addr},
          {"MASTER_PORT", std::to_string(plan.master_port)},
          {"TORCHELASTIC_RESTART_COUNT", std::to_string(plan.restart_count)},
          {"TORCHELASTIC_MAX_RESTARTS", std::to_string(plan.max_restarts)}};
}

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
