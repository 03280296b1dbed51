#include "engine/dist/init.h"

#include <cstdlib>

#include "engine/dist/backend_registry.h"
#include "engine/dist/checked_backend.h"
#include "engine/dist/context.h"
#include "engine/dist/errors.h"

namespace engine::dist {

LaunchSpec init_dist(const std::string& launcher, const std::string& backend,
                     const InitOptions& options) {
  if (launcher != "pytorch" && launcher != "mpi" && launcher != "slurm") {
    throw InvalidArgument("init_dist: launcher must be pytorch, mpi or slurm, got '" + launcher +
                          "' (for a single process, do not call init_dist)");
  }
  const LaunchSpec spec =
      launch_spec(launcher, process_environment(), LaunchOptions{options.port, backend != "mpi"});
  for (const auto& [name, value] : spec.torchrun_variables())
    setenv(name.c_str(), value.c_str(), 1);
  BackendOptions backend_options;
  backend_options.rank = spec.rank;
  backend_options.world_size = spec.world_size;
  backend_options.local_rank = spec.local_rank;
  backend_options.local_world_size = spec.local_world_size;
  backend_options.master_addr = spec.master_addr;
  backend_options.master_port = spec.master_port;
  backend_options.agent_store_prefix = spec.agent_store_prefix;
  backend_options.store_libtorch = spec.store_libtorch;
  backend_options.timeout = options.timeout;
  auto world = create_backend(backend, backend_options);
  const char* debug = std::getenv("DIST_ENGINE_DEBUG");
  if (options.debug || (debug && std::string(debug) == "DETAIL"))
    world = with_call_checks(std::move(world));
  init_process_group(std::move(world));
  return spec;
}

}  // namespace engine::dist
