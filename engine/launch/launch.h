#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

// Reading the launch environment: which launcher started this process and
// where it stands. Pure functions of an Environment, so that every rule and
// every bad input can be tested without launching anything.
namespace engine::dist {

using Environment = std::map<std::string, std::string>;

// This process's environment variables.
Environment process_environment();

// mmengine's infer_launcher: "pytorch" when WORLD_SIZE is set, else "slurm"
// when SLURM_NTASKS is, else "mpi" when OMPI_COMM_WORLD_LOCAL_RANK is, else
// "none".
std::string infer_launcher(const Environment& env);

// Where this process stands in the job.
struct LaunchSpec {
  std::string launcher;  // "pytorch", "mpi", "slurm" or "none"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;        // torchrun's GROUP_RANK
  std::string master_addr;  // rendezvous host; empty if none is needed or known
  int master_port = 29500;  // torchrun and mmengine default
  // Non-empty when torchrun's agent already hosts the store at the master
  // address (TORCHELASTIC_USE_AGENT_STORE=True, torchrun without
  // --standalone): every rank joins it as a client, under this key prefix
  // ("/worker/attempt_<TORCHELASTIC_RESTART_COUNT>", as torch.distributed
  // does) so that a restarted attempt never reads the keys of an earlier one.
  std::string agent_store_prefix;
  // Under engine-launch: the LibTorch ("MAJOR.MINOR") whose c10d store the
  // launcher hosts (DIST_ENGINE_STORE_LIBTORCH); empty otherwise.
  std::string store_libtorch;

  // RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_PORT
  // and (when known) MASTER_ADDR, as torchrun sets them: what the process
  // should see, whichever launcher started it (mmengine never sets
  // LOCAL_RANK under mpirun, which breaks its DDP strategy there).
  Environment torchrun_variables() const;
};

struct LaunchOptions {
  // The rendezvous port; default: MASTER_PORT, else 29500.
  std::optional<int> port;
  // A TCP rendezvous (Gloo, NCCL) needs MASTER_ADDR; MPI does not.
  bool needs_master_addr = true;
};

// Reads `launcher`'s variables from `env`:
// - pytorch: RANK, WORLD_SIZE, LOCAL_RANK (required), LOCAL_WORLD_SIZE
//   (default: WORLD_SIZE), GROUP_RANK (default: RANK / LOCAL_WORLD_SIZE),
//   MASTER_ADDR, MASTER_PORT; TORCHELASTIC_USE_AGENT_STORE and
//   TORCHELASTIC_RESTART_COUNT under torchrun; DIST_ENGINE_STORE_LIBTORCH
//   under engine-launch.
// - mpi: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (required),
//   MASTER_ADDR, MASTER_PORT. Open MPI names no node: node_rank is
//   RANK / LOCAL_SIZE, right only for even nodes in rank order, until
//   init_dist numbers the nodes by hostname.
// - slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODELIST
//   (required); tasks per node from SLURM_TASKS_PER_NODE, else SLURM_NTASKS
//   spread evenly over the nodes; node from SLURM_NODEID, else derived; the
//   master address is MASTER_ADDR if set, else the first host of the node
//   list (expanded natively).
// - none: a single process.
// Throws InvalidArgument naming the variable for a missing or non-numeric
// value, a rank outside [0, world size), a missing MASTER_ADDR when
// `needs_master_addr`, or a malformed node list.
LaunchSpec launch_spec(const std::string& launcher, const Environment& env,
                       const LaunchOptions& options = {});

// The node of every rank of a job whose rank r runs on the machine named
// hostnames[r], which it says holds local_sizes[r] ranks: the nodes numbered
// by hostname in the order of their lowest rank (what mpirun's environment
// does not say; init_dist gathers the names). Throws InvalidArgument, from
// rank `rank`, naming the first rank whose hostname holds another number of
// ranks than its local size: two machines share a name.
std::vector<int> node_ranks_by_hostname(const std::vector<std::string>& hostnames,
                                        const std::vector<int>& local_sizes, int rank);

}  // namespace engine::dist
