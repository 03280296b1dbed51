// Our mpi backend against plain Open MPI in one job. For each collective and
// size it runs rounds of --iters calls through engine::dist, then --iters
// calls of MPI's own collective on the same buffers (which side goes first
// alternates by round), and prints the medians over rounds of the slowest
// rank's time per call. Separate runs of `collectives` and `mpi_peer` differ
// by 10-25% on a shared VM, more than the 5% the comparison is about; paired
// rounds in one job see the same placement, pages and neighbours.
//
//   mpirun -np 2 mpi_paired --ops all_reduce,broadcast,all_gather,reduce_scatter_tensor
//          --min-bytes 4K
//          --max-bytes 16M --iters 20 --rounds 21
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "engine/dist/dist.h"
#include "tools/bench/descriptor.h"
#include "tools/bench/flags.h"
#include "tools/bench/machine.h"
#include "tools/bench/sweep.h"

namespace {

namespace dist = engine::dist;

struct Args {
  std::vector<std::string> ops = {"all_reduce", "broadcast", "all_gather"};
  bench::Sweep sweep;
  int rounds = 21;
};

[[noreturn]] void usage(const std::string& problem) {
  bench::exit_with_usage(
      "mpi_paired", problem,
      "usage: mpirun -np N mpi_paired\n"
      "                  [--ops all_reduce,broadcast,all_gather,reduce_scatter_tensor]\n"
      "                  [--min-bytes 4K] [--max-bytes 64M] [--factor 4] [--iters 50]\n"
      "                  [--warmup 5] [--rounds 21]\n");
}

Args parse(int argc, char** argv) {
  Args args;
  bench::for_each_flag(argc, argv, usage, [&](const std::string& flag, const std::string& value) {
    if (args.sweep.parse_flag(flag, value)) return;
    if (flag == "--ops")
      args.ops = bench::split_commas(value);
    else if (flag == "--rounds")
      args.rounds = std::stoi(value);
    else
      usage("unknown flag " + flag);
  });
  if (args.rounds < 1 || !args.sweep.valid()) usage("bad value");
  return args;
}

// MPI's own collective on the buffers the descriptor made: in place, float
// sum, root 0, as mpi_peer calls it.
std::function<void(bench::Buffers&)> plain_mpi(const std::string& op) {
  if (op == "all_reduce") {
    return [](bench::Buffers& b) {
      MPI_Allreduce(MPI_IN_PLACE, b.tensor.data_ptr(), static_cast<int>(b.tensor.numel()),
                    MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    };
  }
  if (op == "broadcast") {
    return [](bench::Buffers& b) {
      MPI_Bcast(b.tensor.data_ptr(), static_cast<int>(b.tensor.numel()), MPI_FLOAT, 0,
                MPI_COMM_WORLD);
    };
  }
  if (op == "all_gather") {
    return [](bench::Buffers& b) {
      const int count = static_cast<int>(b.tensor.numel());
      MPI_Allgather(b.tensor.data_ptr(), count, MPI_FLOAT, b.output.data_ptr(), count, MPI_FLOAT,
                    MPI_COMM_WORLD);
    };
  }
  if (op == "reduce_scatter_tensor") {
    return [](bench::Buffers& b) {
      MPI_Reduce_scatter_block(b.tensor.data_ptr(), b.output.data_ptr(),
                               static_cast<int>(b.output.numel()), MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
    };
  }
  usage("--ops takes all_reduce, broadcast, all_gather and reduce_scatter_tensor, not " + op);
}

// One collective of --ops, through the engine and as plain MPI.
struct Compared {
  bench::Descriptor ours;
  std::function<void(bench::Buffers&)> mpi;
};

// Every --ops collective, checked before any of them runs.
std::vector<Compared> compared(const std::vector<std::string>& ops) {
  const std::vector<bench::Descriptor> all = bench::all_descriptors();
  std::vector<Compared> out;
  for (const auto& op : ops) {
    const auto d =
        std::find_if(all.begin(), all.end(), [&](const auto& d) { return d.name == op; });
    if (d == all.end()) usage("unknown collective " + op);
    out.push_back({*d, plain_mpi(op)});
  }
  return out;
}

// The slowest rank's time per call of `iters` calls, in us.
double timed(const std::function<void(bench::Buffers&)>& run, bench::Buffers& buffers, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double seconds = MPI_Wtime();
  for (int i = 0; i < iters; ++i) run(buffers);
  seconds = (MPI_Wtime() - seconds) / iters;
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds * 1e6;
}

// Wrong elements over all ranks after one call on fresh buffers.
long long wrong_after(const std::function<void(bench::Buffers&)>& run, const bench::Descriptor& d,
                      int64_t bytes, int rank, int n) {
  bench::Buffers fresh = d.make(rank, n, bytes);
  run(fresh);
  long long wrong = d.count_wrong(fresh, rank, n, bytes);
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return wrong;
}

struct Pair {
  double ours_us;
  double mpi_us;
  long long wrong;
};

Pair measure(const Compared& c, const Args& args, int64_t bytes, int rank, int n) {
  const bench::Descriptor& d = c.ours;
  const auto& mpi = c.mpi;
  bench::Buffers buffers = d.make(rank, n, bytes);
  for (int i = 0; i < args.sweep.warmup; ++i) {
    d.run(buffers);
    mpi(buffers);
  }
  const int iters = args.sweep.iterations_for(bytes);
  std::vector<double> ours;
  std::vector<double> theirs;
  for (int round = 0; round < args.rounds; ++round) {
    if (round % 2 == 0) ours.push_back(timed(d.run, buffers, iters));
    theirs.push_back(timed(mpi, buffers, iters));
    if (round % 2 == 1) ours.push_back(timed(d.run, buffers, iters));
  }
  return {bench::median(ours), bench::median(theirs),
          wrong_after(d.run, d, bytes, rank, n) + wrong_after(mpi, d, bytes, rank, n)};
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const std::vector<Compared> collectives = compared(args.ops);
  at::set_num_threads(1);
  dist::init_dist("mpi", "mpi");
  const int rank = dist::get_rank();
  const int n = dist::get_world_size();
  if (rank == 0) {
    const bench::Machine machine = bench::describe_machine();
    std::printf("# machine: %d cores, %s; %d ranks; %d rounds per size, medians\n", machine.cores,
                machine.cpu.c_str(), n, args.rounds);
    std::printf("#%15s %12s %10s %10s %7s %9s %7s\n", "collective", "size(B)", "ours(us)",
                "mpi(us)", "ratio", "diff(us)", "#wrong");
  }
  long long total_wrong = 0;
  for (const auto& c : collectives) {
    for (int64_t bytes = args.sweep.min_bytes; bytes <= args.sweep.max_bytes;
         bytes *= args.sweep.factor) {
      const Pair p = measure(c, args, bytes, rank, n);
      total_wrong += p.wrong;
      if (rank != 0) continue;
      std::printf(" %15s %12lld %10.2f %10.2f %7.3f %9.2f %7lld\n", c.ours.name.c_str(),
                  static_cast<long long>(bytes), p.ours_us, p.mpi_us, p.ours_us / p.mpi_us,
                  p.ours_us - p.mpi_us, p.wrong);
      std::fflush(stdout);
    }
  }
  dist::destroy_process_group();
  return total_wrong == 0 ? 0 : 1;
}
