// Collectives benchmark in the style of nccl-tests: for each collective and
// size, the mean time per call, algbw, busbw and the count of wrong elements
// from an exact check; where the buffers are on the host, also the median
// and 99th percentile of single calls (a loaded machine shows in the tail).
// Text table on stdout, JSON with --json.
//
//   collectives --ranks 4 --ops all_reduce --min-bytes 4K --max-bytes 64M
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/dist/dist.h"
#include "sim/world.h"
#include "tools/bench/descriptor.h"
#include "tools/bench/flags.h"
#include "tools/bench/machine.h"
#include "tools/bench/sweep.h"

namespace {

namespace dist = engine::dist;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string backend = "sim";  // sim: thread-ranks here; else this process's rank under a launcher
                                // (on nccl the buffers are on the rank's GPU)
  int ranks = 4;
  std::vector<std::string> ops = {"all_reduce"};
  bench::Sweep sweep;
  int yields = sim::WorldOptions().yields_before_blocking;
  std::string json;
};

[[noreturn]] void usage(const std::string& problem) {
  bench::exit_with_usage(
      "collectives", problem,
      "usage: collectives [--backend sim|mpi|gloo|nccl] [--ranks N (sim)] [--ops "
      "all_reduce,...|all]\n"
      "                   [--min-bytes 4K] [--max-bytes 64M] [--factor 4] [--iters 50]\n"
      "                   [--warmup 5] [--json FILE]\n"
      "                   [--yields N: sim ranks yield up to N times before blocking]\n");
}

Args parse(int argc, char** argv) {
  Args args;
  bench::for_each_flag(argc, argv, usage, [&](const std::string& flag, const std::string& value) {
    if (args.sweep.parse_flag(flag, value)) return;
    if (flag == "--backend")
      args.backend = value;
    else if (flag == "--ranks")
      args.ranks = std::stoi(value);
    else if (flag == "--ops")
      args.ops = bench::split_commas(value);
    else if (flag == "--json")
      args.json = value;
    else if (flag == "--yields")
      args.yields = std::stoi(value);
    else
      usage("unknown flag " + flag);
  });
  if (args.ranks < 1 || !args.sweep.valid()) usage("bad value");
  return args;
}

struct Row {
  std::string op;
  int64_t bytes;
  double time_us;
  double p50_us;  // NaN where the calls only queue work on a GPU
  double p99_us;
  double algbw;
  double busbw;
  int64_t wrong;
};

// The nearest-rank percentile `q` (0 < q <= 1) of `sorted`, in ascending order.
double percentile(const std::vector<double>& sorted, double q) {
  const auto at = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::max<size_t>(at, 1) - 1];
}

// One size of one collective on every rank: the slowest rank's mean time per
// call and percentiles of single calls, and the wrong elements summed over
// all ranks.
Row measure(const bench::Descriptor& d, const Args& args, int64_t bytes, int rank, int n) {
  const at::Device device = dist::get_comm_device();
  bench::Buffers buffers = bench::on_device(d.make(rank, n, bytes), device);
  for (int i = 0; i < args.sweep.warmup; ++i) d.run(buffers);
  dist::barrier();
  const int iters = args.sweep.iterations_for(bytes);
  std::vector<double> calls(static_cast<size_t>(iters));
  const auto start = Clock::now();
  for (auto& call : calls) {
    const auto call_start = Clock::now();
    d.run(buffers);
    call = std::chrono::duration<double>(Clock::now() - call_start).count();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  std::sort(calls.begin(), calls.end());
  const double p50 = percentile(calls, 0.50);
  const double p99 = percentile(calls, 0.99);
  at::Tensor slowest = at::tensor({seconds, p50, p99}, at::kDouble);
  dist::all_reduce_anywhere(slowest, "max");

  bench::Buffers fresh = bench::on_device(d.make(rank, n, bytes), device);
  d.run(fresh);
  at::Tensor wrong =
      at::full({1}, d.count_wrong(bench::on_device(fresh, at::kCPU), rank, n, bytes), at::kLong);
  dist::all_reduce_anywhere(wrong, "sum");

  const double t = slowest[0].item<double>();
  const double algbw = bytes / t / 1e9;
  const bool on_host = device.is_cpu();
  const double p50_us = on_host ? slowest[1].item<double>() * 1e6 : std::nan("");
  const double p99_us = on_host ? slowest[2].item<double>() * 1e6 : std::nan("");
  return {d.name,
          bytes,
          t * 1e6,
          p50_us,
          p99_us,
          algbw,
          algbw * d.busbw_factor(n),
          wrong.item<int64_t>()};
}

std::vector<bench::Descriptor> selected(const Args& args) {
  std::vector<bench::Descriptor> out;
  for (const auto& d : bench::all_descriptors()) {
    for (const auto& name : args.ops) {
      if (name == "all" || name == d.name) out.push_back(d);
    }
  }
  if (out.empty()) usage("no known collective in --ops");
  return out;
}

// One size of one collective: on the simulator, in a world of args.ranks
// thread-ranks; on a real backend, on this process's rank of the launched job.
Row measure_size(const bench::Descriptor& d, const Args& args, int64_t bytes) {
  if (args.backend != "sim")
    return measure(d, args, bytes, dist::get_rank(), dist::get_world_size());
  sim::WorldOptions options;
  options.timeout = std::chrono::minutes(10);
  options.yields_before_blocking = args.yields;
  Row row;
  sim::World(args.ranks, options).run([&](int rank) {
    const Row measured = measure(d, args, bytes, rank, args.ranks);
    if (rank == 0) row = measured;
  });
  return row;
}

void write_json(const Args& args, const bench::Machine& machine, double bound,
                const std::vector<Row>& rows) {
  nlohmann::json results = nlohmann::json::array();
  for (const auto& r : rows) {
    results.push_back({{"collective", r.op},
                       {"bytes", r.bytes},
                       {"time_us", r.time_us},
                       {"p50_us", r.p50_us},
                       {"p99_us", r.p99_us},
                       {"algbw_gbps", r.algbw},
                       {"busbw_gbps", r.busbw},
                       {"wrong", r.wrong}});
  }
  const nlohmann::json report = {{"backend", args.backend},
                                 {"ranks", args.ranks},
                                 {"machine", {{"cores", machine.cores}, {"cpu", machine.cpu}}},
                                 {"memcpy_gbps", bound},
                                 {"results", results}};
  std::ofstream(args.json) << report.dump(2) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  at::set_num_threads(1);
  if (args.backend != "sim") {
    dist::init_dist(dist::infer_launcher(dist::process_environment()), args.backend);
    args.ranks = dist::get_world_size();
  }
  const bool reporter = args.backend == "sim" || dist::get_rank() == 0;
  const bench::Machine machine = bench::describe_machine();
  const double bound = reporter ? bench::memcpy_bandwidth() : 0;
  if (reporter) {
    std::printf("# machine: %d cores, %s\n", machine.cores, machine.cpu.c_str());
    std::printf(
        "# 2-thread memcpy: %.2f GB/s read+write -> all_reduce bound for %d ranks: algbw %.2f, "
        "busbw %.2f GB/s\n",
        bound, args.ranks, bound / (2 * args.ranks),
        bound / (2 * args.ranks) * 2.0 * (args.ranks - 1) / args.ranks);
    std::printf("# backend %s, %d ranks, %d+ timed calls per size after %d warm-up\n",
                args.backend.c_str(), args.ranks, args.sweep.iters, args.sweep.warmup);
    std::printf("#%15s %12s %11s %9s %9s %12s %12s %8s\n", "collective", "size(B)", "time(us)",
                "p50(us)", "p99(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  std::vector<Row> rows;
  int64_t total_wrong = 0;
  for (const auto& d : selected(args)) {
    for (int64_t bytes = args.sweep.min_bytes; bytes <= args.sweep.max_bytes;
         bytes *= args.sweep.factor) {
      const Row row = measure_size(d, args, bytes);
      total_wrong += row.wrong;
      rows.push_back(row);
      if (!reporter) continue;
      std::printf(" %15s %12lld %11.1f %9.1f %9.1f %12.3f %12.3f %8lld\n", row.op.c_str(),
                  static_cast<long long>(row.bytes), row.time_us, row.p50_us, row.p99_us, row.algbw,
                  row.busbw, static_cast<long long>(row.wrong));
      std::fflush(stdout);
    }
  }
  if (reporter && !args.json.empty()) write_json(args, machine, bound, rows);
  if (reporter)
    std::printf("# %lld wrong elements in total\n", static_cast<long long>(total_wrong));
  if (args.backend != "sim") dist::destroy_process_group();
  return total_wrong == 0 ? 0 : 1;
}
