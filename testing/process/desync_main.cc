// The flight-recorder diagnosis of a planted desync in N real processes: with
// debug mode on, the backend raises the mismatch on every rank, each rank
// writes its flight record, and rank 0 diagnoses the files of all ranks.
//   desync_main BACKEND DESYNC    (under mpirun or engine-launch;
//                                  DESYNC: skip or different_call)
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "engine/dist/dist.h"
#include "engine/flight/diagnosis.h"
#include "engine/flight/record_files.h"
#include "testing/desync_cases.h"
#include "testing/process/verdict.h"

namespace dist = engine::dist;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: desync_main BACKEND skip|different_call (under a launcher)\n";
    return 2;
  }
  const std::string backend = argv[1];
  at::set_num_threads(1);
  try {
    const auto desync = desync_cases::parse(argv[2]);
    const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/flight_" + argv[2];
    setenv("DIST_ENGINE_FLIGHT_DIR", dir.c_str(), 1);
    dist::InitOptions init;
    init.timeout = std::chrono::seconds(60);  // a missed desync fails the test, never hangs it
    init.debug = true;
    dist::init_dist(backend == "mpi" ? "mpi" : "pytorch", backend, init);
    const int world_size = dist::get_world_size();
    const int odd_rank = world_size - 1;
    desync_cases::plant(desync, odd_rank);
    dist::barrier();  // every rank has written its record
    bool passed = true;
    if (dist::get_rank() == 0) {
      const std::string diagnosis =
          engine::flight::diagnose(engine::flight::read_flight_records({dir}));
      std::cout << diagnosis;
      const auto problem = desync_cases::check_diagnosis(desync, odd_rank, world_size, diagnosis);
      if (problem) std::cerr << *problem << "\n";
      passed = !problem;
    }
    return all_ranks_passed(passed) ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << "desync_main: " << error.what() << "\n";
    return 1;
  }
}
