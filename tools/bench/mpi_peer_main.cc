// The peer for the collectives benchmark: plain Open MPI, in place, float sum,
// with the same sweep, timing and table as `collectives`. Run with mpirun:
//   mpirun -np 4 mpi_peer --ops all_reduce --min-bytes 4K --max-bytes 64M
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/bench/sweep.h"

namespace {

struct Args {
  std::string op = "all_reduce";
  bench::Sweep sweep;
};

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--ops") args.op = value;
    args.sweep.parse_flag(flag, value);
  }
  return args;
}

// One call of the collective on `count` floats per rank (all_gather: count/n each).
void run(const std::string& op, std::vector<float>& data, std::vector<float>& gathered, int n) {
  const int count = static_cast<int>(data.size());
  if (op == "all_reduce") {
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  } else if (op == "broadcast") {
    MPI_Bcast(data.data(), count, MPI_FLOAT, 0, MPI_COMM_WORLD);
  } else {
    MPI_Allgather(data.data(), count / n, MPI_FLOAT, gathered.data(), count / n, MPI_FLOAT,
                  MPI_COMM_WORLD);
  }
}

double busbw_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const Args args = parse(argc, argv);
  if (args.op != "all_reduce" && args.op != "broadcast" && args.op != "all_gather") {
    if (rank == 0)
      std::fprintf(stderr, "mpi_peer: --ops is one of all_reduce, broadcast, all_gather\n");
    MPI_Finalize();
    return 2;
  }
  if (rank == 0) {
    std::printf("# peer: Open MPI %s, %d ranks\n", args.op.c_str(), n);
    std::printf("#%15s %12s %11s %12s %12s %8s\n", "collective", "size(B)", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  long long total_wrong = 0;
  const bench::Sweep& sweep = args.sweep;
  for (long long bytes = sweep.min_bytes; bytes <= sweep.max_bytes; bytes *= sweep.factor) {
    const size_t count = std::max<size_t>(bytes / 4, n);
    std::vector<float> data(count);
    std::vector<float> gathered(count);
    for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>((i + rank) % 7) - 3;
    for (int i = 0; i < sweep.warmup; ++i) run(args.op, data, gathered, n);
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    const int iters = sweep.iterations_for(bytes);
    for (int i = 0; i < iters; ++i) run(args.op, data, gathered, n);
    double seconds = (MPI_Wtime() - start) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    // Exact check of one fresh all_reduce (other ops: the root's values).
    for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>((i + rank) % 7) - 3;
    run(args.op, data, gathered, n);
    long long wrong = 0;
    for (size_t i = 0; i < count && args.op != "all_gather"; ++i) {
      float expected = 0;
      for (int r = 0; r < n; ++r) expected += static_cast<float>((i + r) % 7) - 3;
      if (args.op == "broadcast") expected = static_cast<float>(i % 7) - 3;
      wrong += data[i] != expected;
    }
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    total_wrong += wrong;
    const double algbw = bytes / seconds / 1e9;
    if (rank == 0) {
      std::printf(" %15s %12lld %11.1f %12.3f %12.3f %8lld\n", args.op.c_str(), bytes,
                  seconds * 1e6, algbw, algbw * busbw_factor(args.op, n), wrong);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 1;
}
