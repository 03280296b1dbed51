// A job that stalls on its first attempt, for engine-launch's watchdog
// (--stall-timeout): every rank makes 5 all_reduces; then, on attempt 0
// (TORCHELASTIC_RESTART_COUNT), the last rank is stuck in its own code (it
// sleeps, up to 10 minutes) while the others wait in all_reduce #6, which
// the backend's timeout (30 minutes) would end much later. On later
// attempts every rank makes all 6 and exits 0. Under mpirun, which has no
// attempts (BACKEND mpi), the last rank is stuck on every run. With
// `computing`, no rank is stuck: each computes (sleeps) for COMPUTE_SECONDS
// between calls 3 and 4, outside any call, which is no stall.
//   stall_main BACKEND [computing COMPUTE_SECONDS]
//   (gloo under engine-launch, mpi under mpirun and engine-watch)
#include <ATen/core/Tensor.h>
#include <ATen/ops/ones.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "engine/dist/dist.h"

namespace dist = engine::dist;

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    std::cerr << "usage: stall_main BACKEND [computing COMPUTE_SECONDS]\n";
    return 2;
  }
  const std::string backend = argv[1];
  dist::init_dist(backend == "mpi" ? "mpi" : "pytorch", backend);
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const bool computing = argc == 4;
  const bool first_attempt =
      backend == "mpi" || (attempt != nullptr && std::string(attempt) == "0");
  const bool stall = !computing && first_attempt;
  at::Tensor data = at::ones({256});
  for (int call = 1; call <= 6; ++call) {
    if (call == 6 && stall && dist::get_rank() == dist::get_world_size() - 1) {
      std::cout << "stuck in this rank's own code" << std::endl;
      std::this_thread::sleep_for(std::chrono::minutes(10));
      return 1;
    }
    if (call == 4 && computing)
      std::this_thread::sleep_for(std::chrono::seconds(std::stoi(argv[3])));
    dist::all_reduce(data);
  }
  std::cout << "all 6 calls done" << std::endl;
  return 0;
}
