// A rank of a job whose network is cut mid-collective: all_reduce after
// all_reduce until one fails; rank 0 writes MARK after the 20th, so that the
// test cuts a cable while every rank is in the loop. Prints the error's type
// and text, and exits 3 when it is a Timeout or a PeerFailure that came
// within the backend's timeout (with 30 s to spare for a loaded machine: the
// point is that nothing waits longer), 1 for any other outcome.
//   link_cut_main BACKEND MARK TIMEOUT_MS     (under srun_on_hosts.sh)
#include <ATen/core/Tensor.h>
#include <ATen/ops/ones.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <string>

#include "engine/dist/dist.h"

namespace dist = engine::dist;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: link_cut_main BACKEND MARK TIMEOUT_MS\n";
    return 2;
  }
  dist::InitOptions options;
  options.timeout = std::chrono::milliseconds(std::stoi(argv[3]));
  dist::init_dist("slurm", argv[1], options);
  const int rank = dist::get_rank();
  at::Tensor data = at::ones({1024});
  for (int round = 1;; ++round) {
    const auto started = std::chrono::steady_clock::now();
    try {
      dist::all_reduce(data);
    } catch (const std::exception& error) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - started);
      const char* type = dist::dist_error_kind(std::current_exception());
      std::cout << "[rank " << rank << "] round " << round << ": " << (type ? type : "other")
                << " after " << waited.count() << " ms: " << error.what() << std::endl;
      const bool typed =
          type && (std::string(type) == "Timeout" || std::string(type) == "PeerFailure");
      const bool bounded = waited <= options.timeout + std::chrono::seconds(30);
      return typed && bounded ? 3 : 1;
    }
    data.fill_(1);
    if (round == 20 && rank == 0) std::ofstream(argv[2]) << "in the loop\n";
  }
}
