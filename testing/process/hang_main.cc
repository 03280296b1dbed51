// The flight-recorder diagnosis of a real hang in N processes, without debug
// mode: the last rank never joins all_reduce #2, the others' waits time out,
// the recorder writes their records on the Timeout, the absent rank writes
// its own on demand, and rank 0 diagnoses the files of all ranks.
//   hang_main BACKEND    (under mpirun or engine-launch)
// Nothing depends on timing: the absent rank joins only after every other
// rank has timed out (marker files say so), which also lets the pending
// collective end (neither MPI nor Gloo can cancel it).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/ones.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "engine/dist/dist.h"
#include "engine/flight/diagnosis.h"
#include "engine/flight/record_files.h"
#include "testing/process/marker_files.h"
#include "testing/process/verdict.h"

namespace {

namespace dist = engine::dist;
namespace fs = std::filesystem;

fs::path marker_of(const fs::path& dir, int rank) {
  return dir / ("timed_out_" + std::to_string(rank));
}

void await_markers(const fs::path& dir, int absent) {
  std::vector<fs::path> markers;
  for (int rank = 0; rank < absent; ++rank) markers.push_back(marker_of(dir, rank));
  if (!await_files(markers, std::chrono::minutes(2))) {
    throw std::runtime_error("the other ranks never timed out");
  }
}

std::optional<std::string> check(const std::string& diagnosis, int world_size) {
  const int absent = world_size - 1;
  const std::string group = "(group [0-" + std::to_string(absent) + "], 1 KiB Float[256], sum)";
  const std::string others =
      absent == 1 ? "rank 0 failed in" : "ranks 0-" + std::to_string(absent - 1) + " failed in";
  for (const std::string& part :
       {"flight records of " + std::to_string(world_size) + " of " + std::to_string(world_size),
        "rank " + std::to_string(absent) + " has no call in flight (last: all_reduce #1 " + group +
            ")",
        others + " all_reduce #2 " + group, std::string("rank 0 failed in all_reduce #2: "),
        std::string("did not complete within 2000 ms")}) {
    if (diagnosis.find(part) == std::string::npos) {
      return "the diagnosis lacks \"" + part + "\":\n" + diagnosis;
    }
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: hang_main BACKEND (under a launcher)\n";
    return 2;
  }
  const std::string backend = argv[1];
  at::set_num_threads(1);
  try {
    const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / "flight_hang";
    fs::create_directories(dir);
    setenv("DIST_ENGINE_FLIGHT_DIR", dir.c_str(), 1);
    dist::InitOptions init;
    init.timeout = std::chrono::seconds(60);
    dist::init_dist(backend == "mpi" ? "mpi" : "pytorch", backend, init);
    const int rank = dist::get_rank();
    const int absent = dist::get_world_size() - 1;
    at::Tensor t = at::ones({256});
    dist::all_reduce(t);
    if (rank != absent) {
      dist::WorkPtr work = dist::all_reduce_async(t);
      try {
        work->wait(std::chrono::milliseconds(2000));
        throw std::logic_error("all_reduce #2 completed without rank " + std::to_string(absent));
      } catch (const dist::Timeout&) {
      }
      std::ofstream(marker_of(dir, rank)) << "timed out\n";
      work->wait();  // the absent rank joins now
    } else {
      await_markers(dir, absent);
      dist::dump_flight_record(dir.string());
      dist::all_reduce(t);
    }
    dist::barrier();  // every rank has written its record
    bool passed = true;
    if (rank == 0) {
      const std::string diagnosis =
          engine::flight::diagnose(engine::flight::read_flight_records({dir.string()}));
      std::cout << diagnosis;
      const auto problem = check(diagnosis, dist::get_world_size());
      if (problem) std::cerr << *problem << "\n";
      passed = !problem;
    }
    return all_ranks_passed(passed) ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << "hang_main: " << error.what() << "\n";
    return 1;
  }
}
