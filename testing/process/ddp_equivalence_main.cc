// The DDP equivalence property in N real processes: every rank draws the same
// cases from the same RapidCheck seed (RC_PARAMS, set alike for all ranks by
// the run script), trains its share under MMDistributedDataParallel and the
// serial reference on the concatenated batch, and the ranks agree on each
// verdict (an all_reduce) so that RapidCheck shrinks the same way on all.
//   ddp_equivalence_main BACKEND      (under mpirun or engine-launch)
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/equal.h>
#include <rapidcheck.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "engine/dist/dist.h"
#include "testing/model/ddp_cases.h"
#include "testing/process/verdict.h"
#include "testing/property.h"

namespace {

namespace dist = engine::dist;

// The first member's parameters after every step, compared bit for bit on
// each member. Every rank of the world takes part in the broadcasts, a rank
// outside the members receiving into a copy of the serial run's snapshots
// (the same names and shapes).
std::optional<std::string> differs_from_first_member(const ddp_cases::TrainingCase& c,
                                                     const ddp_cases::Snapshots& expected,
                                                     const ddp_cases::Snapshots& mine) {
  const int first = c.members.front();
  std::optional<std::string> problem;
  for (size_t it = 0; it < expected.size(); ++it) {
    for (const auto& [name, value] : expected[it]) {
      at::Tensor theirs = (mine.empty() ? value : mine[it].at(name)).clone();
      dist::broadcast_anywhere(theirs, first);
      if (!problem && !mine.empty() && !at::equal(theirs, mine[it].at(name))) {
        problem = "iteration " + std::to_string(it) + " " + name + ": rank " +
                  std::to_string(dist::get_rank()) + " differs from rank " + std::to_string(first);
      }
    }
  }
  return problem;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: ddp_equivalence_main BACKEND (under a launcher)\n";
    return 2;
  }
  const std::string backend = argv[1];
  at::set_num_threads(1);
  try {
    dist::InitOptions init;
    init.timeout = std::chrono::seconds(60);  // a desync fails the test, never hangs it
    dist::init_dist(backend == "mpi" ? "mpi" : "pytorch", backend, init);
    const int world_size = dist::get_world_size();
    const int rank = dist::get_rank();
    const std::string property = "DDP in " + std::to_string(world_size) + " processes on " +
                                 backend + " matches one process on the concatenated batch";
    const auto outcome = repro::run_property(
        [&] {
          const auto c = *ddp_cases::training_case(world_size);
          auto initial = ddp_cases::initial_net(c);
          const auto expected = ddp_cases::train_serial(c, *initial);
          const auto mine = ddp_cases::train_rank(c, *initial, rank);
          std::optional<std::string> problem;
          if (!mine.empty()) {
            problem = ddp_cases::first_departure(
                expected, mine, "rank " + std::to_string(rank) + " against the serial run");
          }
          const auto between_members = differs_from_first_member(c, expected, mine);
          if (!problem) problem = between_members;
          if (problem) std::cerr << *problem << "\n";  // the launcher prefixes the rank
          RC_ASSERT(all_ranks_passed(!problem));
        },
        "ddp_equivalence", property);
    std::cout << "- " << property << "\n" << outcome.message << std::endl;
    if (!outcome.passed) {
      std::cout << "Reproduce with: " << repro::command_for("", outcome.replay_rc_params)
                << std::endl;
    }
    dist::barrier();
    return outcome.passed ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << "[rank ?] ddp_equivalence_main: " << error.what() << "\n";
    return 1;
  }
}
