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
// are); MASTER_ADDR is required unless the backend is "mpi".
LaunchSpec init_dist(const std::string& launcher, const std::string& backend,
                     const InitOptions& options = {});

}  // namespace engine::dist
