#include "engine/launch/launch.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include "engine/dist/errors.h"
#include "engine/launch/hostlist.h"

extern char** environ;

namespace engine::dist {
namespace {

constexpr int kDefaultPort = 29500;

[[noreturn]] void bad(const std::string& launcher, const std::string& what) {
  throw InvalidArgument("launcher '" + launcher + "': " + what);
}

const std::string* find(const Environment& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// Reads one whole, non-negative number; `fallback` when the variable is unset.
int number(const std::string& launcher, const Environment& env, const std::string& name,
           std::optional<int> fallback = std::nullopt) {
  const std::string* value = find(env, name);
  if (!value) {
    if (fallback) return *fallback;
    bad(launcher, name + " is not set: the launcher should set it (is this process started by " +
                      launcher + "?)");
  }
  const bool digits =
      !value->empty() && value->size() <= 9 &&
      std::all_of(value->begin(), value->end(), [](unsigned char c) { return std::isdigit(c); });
  if (!digits) bad(launcher, name + "='" + *value + "' is not a non-negative whole number");
  return std::stoi(*value);
}

void check_below(const std::string& launcher, const std::string& name, int value,
                 const std::string& bound_name, int bound) {
  if (value >= bound) {
    bad(launcher, name + "=" + std::to_string(value) + " must be below " + bound_name + "=" +
                      std::to_string(bound));
  }
}

void check_positive(const std::string& launcher, const std::string& name, int value) {
  if (value < 1) bad(launcher, name + " must be at least 1, got " + std::to_string(value));
}

void read_rendezvous(LaunchSpec& spec, const Environment& env, const LaunchOptions& options) {
  spec.master_port =
      options.port ? *options.port : number(spec.launcher, env, "MASTER_PORT", kDefaultPort);
  if (spec.master_port < 1 || spec.master_port > 65535) {
    bad(spec.launcher,
        "MASTER_PORT=" + std::to_string(spec.master_port) + " is not a TCP port (1-65535)");
  }
  if (const std::string* addr = find(env, "MASTER_ADDR"); addr && !addr->empty())
    spec.master_addr = *addr;
  if (spec.master_addr.empty() && options.needs_master_addr) {
    bad(spec.launcher,
        "MASTER_ADDR is not set: a TCP rendezvous needs the host of rank 0; set "
        "MASTER_ADDR (for example 127.0.0.1 on one machine)");
  }
}

// The names a launcher gives the four numbers every rank needs.
struct RankVariables {
  const char* world_size;
  const char* rank;
  const char* local_rank;
  const char* local_world_size;
};

// Reads and checks them; an unset local world size is `local_default` when given.
LaunchSpec read_ranks(const std::string& launcher, const Environment& env,
                      const RankVariables& names, std::optional<int> local_default = std::nullopt) {
  LaunchSpec spec;
  spec.launcher = launcher;
  spec.world_size = number(launcher, env, names.world_size);
  spec.rank = number(launcher, env, names.rank);
  spec.local_rank = number(launcher, env, names.local_rank);
  spec.local_world_size = number(launcher, env, names.local_world_size, local_default);
  check_positive(launcher, names.world_size, spec.world_size);
  check_positive(launcher, names.local_world_size, spec.local_world_size);
  check_below(launcher, names.rank, spec.rank, names.world_size, spec.world_size);
  check_below(launcher, names.local_rank, spec.local_rank, names.local_world_size,
              spec.local_world_size);
  return spec;
}

LaunchSpec from_pytorch(const Environment& env, const LaunchOptions& options) {
  const RankVariables names = {"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
  const int world_size = number("pytorch", env, names.world_size);
  LaunchSpec spec = read_ranks("pytorch", env, names, world_size);
  spec.node_rank = number(spec.launcher, env, "GROUP_RANK", spec.rank / spec.local_world_size);
  read_rendezvous(spec, env, options);
  if (const std::string* agent = find(env, "TORCHELASTIC_USE_AGENT_STORE");
      agent && *agent == "True") {
    spec.agent_store_prefix =
        "/worker/attempt_" +
        std::to_string(number(spec.launcher, env, "TORCHELASTIC_RESTART_COUNT", 0));
    if (const std::string* libtorch = find(env, "DIST_ENGINE_STORE_LIBTORCH"))
      spec.store_libtorch = *libtorch;
  }
  return spec;
}

LaunchSpec from_mpi(const Environment& env, const LaunchOptions& options) {
  LaunchSpec spec = read_ranks("mpi", env,
                               {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                                "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  spec.node_rank = spec.rank / spec.local_world_size;
  read_rendezvous(spec, env, options);
  return spec;
}

// The node that holds `rank` when the nodes hold per_node[i] ranks each, in
// rank order, as srun's block distribution places them; past the last node
// when the counts hold fewer ranks (the caller's bounds check names it).
int node_holding(int rank, const std::vector<int>& per_node) {
  int end = 0;
  for (size_t node = 0; node < per_node.size(); ++node) {
    end += per_node[node];
    if (rank < end) return static_cast<int>(node);
  }
  return static_cast<int>(per_node.size());
}

LaunchSpec from_slurm(const Environment& env, const LaunchOptions& options) {
  LaunchSpec spec;
  spec.launcher = "slurm";
  spec.world_size = number(spec.launcher, env, "SLURM_NTASKS");
  spec.rank = number(spec.launcher, env, "SLURM_PROCID");
  spec.local_rank = number(spec.launcher, env, "SLURM_LOCALID");
  check_positive(spec.launcher, "SLURM_NTASKS", spec.world_size);
  check_below(spec.launcher, "SLURM_PROCID", spec.rank, "SLURM_NTASKS", spec.world_size);
  const std::string* nodelist = find(env, "SLURM_NODELIST");
  if (!nodelist) bad(spec.launcher, "SLURM_NODELIST is not set: is this process started by srun?");
  const auto hosts = expand_hostlist(*nodelist);
  const int nodes = static_cast<int>(hosts.size());
  if (const std::string* counts = find(env, "SLURM_TASKS_PER_NODE")) {
    const auto per_node = expand_tasks_per_node(*counts);
    spec.node_rank = number(spec.launcher, env, "SLURM_NODEID", node_holding(spec.rank, per_node));
    check_below(spec.launcher, "SLURM_NODEID", spec.node_rank,
                "the entries of SLURM_TASKS_PER_NODE", static_cast<int>(per_node.size()));
    spec.local_world_size = per_node[spec.node_rank];
  } else {
    if (spec.world_size % nodes != 0) {
      bad(spec.launcher, "SLURM_NTASKS=" + std::to_string(spec.world_size) +
                             " does not spread evenly over " + std::to_string(nodes) +
                             " nodes of SLURM_NODELIST: set SLURM_TASKS_PER_NODE");
    }
    spec.local_world_size = spec.world_size / nodes;
    spec.node_rank = number(spec.launcher, env, "SLURM_NODEID", spec.rank / spec.local_world_size);
  }
  check_positive(spec.launcher, "the tasks on this node (SLURM_TASKS_PER_NODE)",
                 spec.local_world_size);
  check_below(spec.launcher, "SLURM_NODEID", spec.node_rank, "the nodes in SLURM_NODELIST", nodes);
  check_below(spec.launcher, "SLURM_LOCALID", spec.local_rank, "the tasks on this node",
              spec.local_world_size);
  LaunchOptions first_host = options;
  first_host.needs_master_addr = false;
  read_rendezvous(spec, env, first_host);
  if (spec.master_addr.empty()) spec.master_addr = hosts.front();
  return spec;
}

}  // namespace

Environment process_environment() {
  Environment env;
  for (char** entry = environ; *entry; ++entry) {
    const std::string text = *entry;
    const size_t equals = text.find('=');
    if (equals != std::string::npos) env[text.substr(0, equals)] = text.substr(equals + 1);
  }
  return env;
}

std::string infer_launcher(const Environment& env) {
  if (find(env, "WORLD_SIZE")) return "pytorch";
  if (find(env, "SLURM_NTASKS")) return "slurm";
  if (find(env, "OMPI_COMM_WORLD_LOCAL_RANK")) return "mpi";
  return "none";
}

LaunchSpec launch_spec(const std::string& launcher, const Environment& env,
                       const LaunchOptions& options) {
  LaunchSpec spec;
  if (launcher == "pytorch")
    spec = from_pytorch(env, options);
  else if (launcher == "mpi")
    spec = from_mpi(env, options);
  else if (launcher == "slurm")
    spec = from_slurm(env, options);
  else if (launcher == "none")
    spec.launcher = "none";
  else
    bad(launcher, "unknown launcher: use pytorch, mpi, slurm or none");
  return spec;
}

Environment LaunchSpec::torchrun_variables() const {
  Environment env = {{"RANK", std::to_string(rank)},
                     {"LOCAL_RANK", std::to_string(local_rank)},
                     {"WORLD_SIZE", std::to_string(world_size)},
                     {"LOCAL_WORLD_SIZE", std::to_string(local_world_size)},
                     {"GROUP_RANK", std::to_string(node_rank)},
                     {"MASTER_PORT", std::to_string(master_port)}};
  if (!master_addr.empty()) env["MASTER_ADDR"] = master_addr;
  return env;
}

std::vector<int> node_ranks_by_hostname(const std::vector<std::string>& hostnames,
                                        const std::vector<int>& local_sizes, int rank) {
  std::map<std::string, int> node_of;  // by hostname
  std::map<std::string, int> ranks_on;
  for (const std::string& name : hostnames) {
    node_of.emplace(name, static_cast<int>(node_of.size()));
    ++ranks_on[name];
  }
  std::vector<int> nodes;
  for (size_t r = 0; r < hostnames.size(); ++r) {
    if (ranks_on[hostnames[r]] != local_sizes[r]) {
      throw InvalidArgument(on_rank(
          rank, "rank " + std::to_string(r) + " says its node holds " +
                    std::to_string(local_sizes[r]) + " ranks, but " +
                    std::to_string(ranks_on[hostnames[r]]) + " ranks run on hosts named \"" +
                    hostnames[r] + "\": give every machine of the job a hostname of its own"));
    }
    nodes.push_back(node_of[hostnames[r]]);
  }
  return nodes;
}

}  // namespace engine::dist
