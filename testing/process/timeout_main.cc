// A call that some rank never makes ends in a Timeout on the waiting rank,
// not a hang and not a peer failure, also when Gloo's own timeout (the
// backend's, which the adapter's rings and c10d both pass to Gloo) runs out
// before the wait does: the wait here is longer.
//   timeout_main BACKEND BYTES|object    (2 ranks, under a launcher)
// BYTES: an all_reduce of that size; object: all_gather_object, which waits
// inside with the backend's timeout.
// Rank 1 never makes the call; it exits only once rank 0 has timed out (a
// marker file says so), so that rank 0 sees a missing rank, not a closed
// connection. Each rank's exit status is its verdict: after a timeout the
// ranks share no working collective to agree through.
#include <ATen/core/Tensor.h>
#include <ATen/ops/ones.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "engine/dist/dist.h"
#include "testing/process/marker_files.h"

namespace {

namespace dist = engine::dist;
namespace fs = std::filesystem;

constexpr auto kTimeout = std::chrono::seconds(2);

int wait_for_a_missing_rank(const std::string& call, const fs::path& marker) {
  const auto start = std::chrono::steady_clock::now();
  try {
    if (call == "object") {
      dist::all_gather_object(c10::IValue(std::string("rank 0")));
    } else {
      at::Tensor t = at::ones({std::stoll(call) / 4});
      dist::all_reduce_async(t)->wait(2 * kTimeout);
    }
    std::cerr << call << " completed without rank 1\n";
    return 1;
  } catch (const dist::Timeout& error) {
    std::ofstream(marker) << "timed out\n";
    if (std::chrono::steady_clock::now() - start < kTimeout) {
      std::cerr << "Timeout before the timeout had passed: " << error.what() << "\n";
      return 1;
    }
    std::cout << "rank 0: " << error.what() << "\n";
    return 0;
  }
}

int stay_away_until(const fs::path& marker) {
  if (await_files({marker}, std::chrono::minutes(2))) return 0;
  std::cerr << "rank 0 never timed out\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: timeout_main BACKEND BYTES|object (2 ranks, under a launcher)\n";
    return 2;
  }
  try {
    dist::InitOptions init;
    init.timeout = kTimeout;
    dist::init_dist("pytorch", argv[1], init);
    const fs::path marker = fs::path(std::getenv("TEST_TMPDIR")) / "rank0_timed_out";
    return dist::get_rank() == 0 ? wait_for_a_missing_rank(argv[2], marker)
                                 : stay_away_until(marker);
  } catch (const std::exception& error) {
    std::cerr << "timeout_main: " << error.what() << "\n";
    return 1;
  }
}
