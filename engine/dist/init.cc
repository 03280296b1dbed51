#include "engine/dist/init.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/dist/backend_registry.h"
#include "engine/dist/context.h"
#include "engine/dist/debug_mode.h"
#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

std::string this_hostname() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// Every rank's hostname and local size, gathered on `world` before it
// becomes the process group, so that the user's first collective stays the
// first that the flight recorder and the call checks number. One row per
// rank: the local size, then the hostname's bytes (NUL-padded).
int mpi_node_rank(Backend& world, const LaunchSpec& spec) {
  constexpr int64_t kRow = 1 + 256;
  const std::string hostname = this_hostname();
  at::Tensor mine = at::zeros({kRow}, at::kLong);
  int64_t* mine_data = mine.data_ptr<int64_t>();
  mine_data[0] = spec.local_world_size;
  std::copy(hostname.begin(), hostname.end(), mine_data + 1);
  const at::Device device = world.comm_device();
  at::Tensor all = at::empty({spec.world_size * kRow}, mine.options().device(device));
  world.all_gather_into_tensor(all, mine.to(device))->wait();
  const at::Tensor rows = all.cpu().contiguous();
  std::vector<std::string> hostnames;
  std::vector<int> local_sizes;
  for (int r = 0; r < spec.world_size; ++r) {
    const int64_t* row = rows.data_ptr<int64_t>() + r * kRow;
    local_sizes.push_back(static_cast<int>(row[0]));
    hostnames.emplace_back(row + 1, std::find(row + 1, row + kRow, 0));
  }
  return node_ranks_by_hostname(hostnames, local_sizes, spec.rank)[spec.rank];
}

}  // namespace

LaunchSpec init_dist(const std::string& launcher, const std::string& backend,
                     const InitOptions& options) {
  if (launcher != "pytorch" && launcher != "mpi" && launcher != "slurm") {
    throw InvalidArgument("init_dist: launcher must be pytorch, mpi or slurm, got '" + launcher +
                          "' (for a single process, do not call init_dist)");
  }
  LaunchSpec spec =
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
  if (spec.launcher == "mpi") {
    spec.node_rank = mpi_node_rank(*world, spec);
    setenv("GROUP_RANK", std::to_string(spec.node_rank).c_str(), 1);
  }
  const char* debug = std::getenv("DIST_ENGINE_DEBUG");
  if (options.debug || (debug && std::string(debug) == "DETAIL"))
    world = with_call_checks(std::move(world));
  init_process_group(std::move(world));
  return spec;
}

}  // namespace engine::dist
