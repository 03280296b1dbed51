// The main demo: a classifier trained with DDP from a config file
// (fashion_mnist.json: a CNN on Fashion-MNIST; train_config.json: an MLP on
// generated data), on simulated ranks (default) or in real processes under a
// launcher. Checkpoints go to work_dirs/<config file name> (mmengine's rule).
//
//   bazel run //examples:train                       # 4 simulated ranks
//   bazel run //examples:train -- --ranks 2 --iters 50 --resume auto
//   engine-launch --nproc-per-node 2 train --launcher pytorch --backend gloo
//   mpirun -n 2 train --launcher mpi --backend mpi
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "engine/dist/dist.h"
#include "engine/registry/config.h"
#include "examples/demo.h"
#include "sim/world.h"

namespace {

struct Args {
  std::string config = "examples/fashion_mnist.json";
  int ranks = 4;
  std::optional<std::string> work_dir;  // default: work_dirs/<config name>
  examples::DemoOverrides overrides;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "train: " << problem << "\n"
            << "usage: train [--config FILE] [--ranks N] [--launcher none|pytorch|mpi|slurm]\n"
            << "             [--backend gloo|mpi|nccl] [--iters N] [--checkpoint-interval N]\n"
            << "             [--snapshot-interval N] [--snapshot-overlap 0|1] [--work-dir DIR]\n"
            << "             [--resume FILE|auto] [--load-from FILE] [--trace FILE.json]\n"
            << "             [--ddp-logging FILE.json]\n"
            << "             [--fail-after-batches N]   (a crash, for restart tests)\n"
            << "Without --launcher (or with none) the run uses N simulated ranks.\n";
  std::exit(2);
}

// `value` as an integer of at least `least`.
int to_int(const std::string& flag, const std::string& value, int least = 1) {
  try {
    size_t used = 0;
    const int out = std::stoi(value, &used);
    if (used == value.size() && out >= least) return out;
  } catch (const std::exception&) {
  }
  usage(flag + " needs an integer of at least " + std::to_string(least) + ", got \"" + value +
        "\"");
}

// `value` as 0 (false) or 1 (true).
bool to_switch(const std::string& flag, const std::string& value) {
  if (value != "0" && value != "1") usage(flag + " needs 0 or 1, got \"" + value + "\"");
  return value == "1";
}

// Under `bazel run`, relative paths are the user's, from where they ran it.
std::string user_path(const std::string& path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  return cwd && !path.empty() && path[0] != '/' ? std::string(cwd) + "/" + path : path;
}

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--config")
      args.config = value;
    else if (flag == "--ranks")
      args.ranks = to_int(flag, value);
    else if (flag == "--launcher")
      args.overrides.launcher = value;
    else if (flag == "--backend")
      args.overrides.backend = value;
    else if (flag == "--iters")
      args.overrides.max_iters = to_int(flag, value, /*least=*/0);  // 0: validate only
    else if (flag == "--checkpoint-interval")
      args.overrides.checkpoint_interval = to_int(flag, value);
    else if (flag == "--snapshot-interval")
      args.overrides.snapshot_interval = to_int(flag, value, /*least=*/0);
    else if (flag == "--snapshot-overlap")
      args.overrides.snapshot_overlap = to_switch(flag, value);
    else if (flag == "--work-dir")
      args.work_dir = value;
    else if (flag == "--resume")
      args.overrides.resume_from = value;
    else if (flag == "--load-from")
      args.overrides.load_from = user_path(value);
    else if (flag == "--trace")
      args.overrides.trace_path = user_path(value);
    else if (flag == "--ddp-logging")
      args.overrides.ddp_logging_json = user_path(value);
    else if (flag == "--fail-after-batches")
      args.overrides.fail_after_batches = to_int(flag, value);
    else
      usage("unknown flag " + flag);
  }
  const auto& launcher = args.overrides.launcher;
  if (args.overrides.fail_after_batches && (!launcher || *launcher == "none")) {
    usage("--fail-after-batches kills a rank's process: it needs --launcher");
  }
  args.overrides.work_dir = args.work_dir.value_or(
      user_path("work_dirs/" + std::filesystem::path(args.config).stem().string()));
  return args;
}

engine::registry::Json read_config(const std::string& path) {
  try {
    return engine::registry::read_config_file(path);
  } catch (const engine::registry::ConfigError& error) {
    std::cerr << "train: " << error.what() << "\n";
    std::exit(2);
  }
}

void report(const engine::runner::RunResult& result) {
  if (!engine::dist::is_main_process()) return;
  std::printf("trained from iteration %lld; final val accuracy %.4f\n",
              static_cast<long long>(result.start_iter), result.metrics.at("accuracy"));
  std::printf("training time %.1f s (validation and checkpoints excluded)\n", result.train_seconds);
  if (result.snapshots > 0) {
    std::printf("%lld snapshots took %.1f ms each\n", static_cast<long long>(result.snapshots),
                1000 * result.snapshot_seconds / static_cast<double>(result.snapshots));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  const auto config = read_config(args.config);
  // A trace covers the whole run: keep every call, unless told otherwise.
  if (args.overrides.trace_path) setenv("DIST_ENGINE_FLIGHT_SIZE", "10000000", 0);
  try {
    const bool simulated = !args.overrides.launcher || *args.overrides.launcher == "none";
    if (!simulated) {
      report(examples::run_demo(config, args.overrides));
      return 0;
    }
    args.overrides.launcher = "none";
    args.overrides.shares_process = true;
    std::printf("running on %d simulated ranks\n", args.ranks);
    sim::World(args.ranks).run([&](int) { report(examples::run_demo(config, args.overrides)); });
  } catch (const std::exception& error) {
    std::cerr << "train: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
