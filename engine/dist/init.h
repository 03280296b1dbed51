#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "engine/launch/launch.h"

namespace engine::dist {

struct InitOptions {
  // The rendezvous port (mmengine's `port` for slurm); default MASTER_PORT,
  // else 29500.
  std::optional<int> port;
  // How long a collective may wait for the others (torch.distributed's default).
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // Compare every collective across ranks before data moves
  // (with_call_checks); also on when DIST_ENGINE_DEBUG=DETAIL.
  bool debug = false;
};

// mmengine's init_dist: reads the environment of `launcher` ("pytorch",
// "mpi" or "slurm"; see launch_spec), exports torchrun's variables for the
// rest of the process (so LOCAL_RANK is set under mpirun and srun too),
// creates `backend` from the registry and makes it the process group.
// Throws InvalidArgument for an unknown launcher, a bad environment (naming
// the variable), or a backend not built into this binary (listing those that
// are); MASTER_ADDR is required unless the backend is "mpi". Under mpi,
// whose environment names no node, the returned node_rank and GROUP_RANK
// number the nodes by hostname in the order of their lowest rank (uneven
// nodes included), found through an all_gather on the new backend before it
// becomes the process group (so the flight recorder's first collective is
// still the user's); an InvalidArgument on every rank when a hostname holds
// another number of ranks than its OMPI_COMM_WORLD_LOCAL_SIZE.
LaunchSpec init_dist(const std::string& launcher, const std::string& backend,
                     const InitOptions& options = {});

}  // namespace engine::dist
