// The DDP step benchmark: one training step (forward, backward with the
// reducer's overlapped all_reduces, SGD step) of an MLP through
// MMDistributedDataParallel, batch 64 per rank, one intra-op thread per rank.
// Rank 0 prints one line: the median step time over --steps steps after
// --warmup. Its peer is torch_ddp_peer.py (PyTorch's Python DDP, same model).
// On nccl the model trains on the rank's GPU. --comm-hook registers a
// communication hook (PowerSGD: rank 1 from the third step, PyTorch's other
// defaults), and the line gives the bytes each rank hands to all_reduce
// per step under it.
//
//   engine-launch --nproc-per-node 2 ddp_step --backend gloo --model small
//   mpirun -n 2 ddp_step --backend mpi --model large
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/tensor.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "engine/dist/dist.h"
#include "engine/model/comm_hooks/comm_hook_registry.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
#include "tools/bench/flags.h"
#include "tools/bench/mlp.h"
#include "tools/bench/sweep.h"

namespace {

struct Args : bench::StepFlags {
  Args() {
    model = "small";
    steps = 30;
    warmup = 5;
  }
  // The wrapper's own defaults unless a flag says otherwise.
  engine::model::DDPOptions ddp;
  std::string comm_hook = "none";
};

// The hooks by their --comm-hook names, as torch_ddp_peer.py registers them.
engine::registry::Json hook_config(const std::string& name) {
  if (name == "fp16" || name == "bf16") return {{"type", name + "_compress"}};
  if (name == "powersgd") {
    return {{"type", "PowerSGD"}, {"matrix_approximation_rank", 1}, {"start_powerSGD_iter", 2}};
  }
  return {{"type", name}};
}

// What one rank hands to all_reduce per step under `hook`: float32
// gradients, halved by the 16-bit hooks; under rank-1 PowerSGD, P and Q for
// each matrix that shrinks by more than PyTorch's min_compression_rate 2,
// the rest whole.
double payload_bytes(const std::vector<at::Tensor>& params, const std::string& hook) {
  double bytes = 0;
  for (const auto& param : params) {
    const double numel = static_cast<double>(param.numel());
    if (hook == "fp16" || hook == "bf16") {
      bytes += 2 * numel;
    } else if (hook == "powersgd" && param.dim() >= 2 &&
               (param.size(0) + numel / param.size(0)) * 2 < numel) {
      bytes += 4 * (param.size(0) + numel / param.size(0));
    } else {
      bytes += 4 * numel;
    }
  }
  return bytes;
}

[[noreturn]] void usage(const std::string& problem) {
  bench::exit_with_usage(
      "ddp_step", problem,
      "usage: ddp_step [--backend gloo|mpi|nccl] [--model small|large] [--batch N]\n"
      "                [--steps N] [--warmup N] [--gradient-as-bucket-view 0|1]\n"
      "                [--bucket-cap-mb 25]\n"
      "                [--comm-hook none|allreduce|fp16|bf16|powersgd]\n"
      "                (under engine-launch or mpirun)\n");
}

Args parse(int argc, char** argv) {
  Args args;
  bench::for_each_flag(argc, argv, usage, [&](const std::string& flag, const std::string& value) {
    if (bench::take_step_flag(args, flag, value)) return;
    if (flag == "--gradient-as-bucket-view") {
      args.ddp.gradient_as_bucket_view = value == "1";
    } else if (flag == "--bucket-cap-mb") {
      args.ddp.bucket_cap_mb = std::stod(value);
    } else if (flag == "--comm-hook") {
      args.comm_hook = value;
    } else {
      usage("unknown flag " + flag);
    }
  });
  if (args.model != "small" && args.model != "large") usage("--model is small or large");
  if (args.comm_hook != "none")
    args.ddp.comm_hook = engine::model::comm_hooks().build(hook_config(args.comm_hook));
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  at::set_num_threads(1);
  namespace dist = engine::dist;
  try {
    dist::init_dist(args.backend == "mpi" ? "mpi" : "pytorch", args.backend);
    const bench::MlpShape shape = bench::mlp_shape(args.model);
    auto model = std::make_shared<bench::Mlp>(shape);
    const at::Device device = dist::get_comm_device();  // the rank's GPU on nccl
    model->to(device);
    engine::model::MMDistributedDataParallel ddp(model, args.ddp);
    engine::optim::OptimWrapper optim(
        std::make_shared<torch::optim::SGD>(ddp.parameters(), torch::optim::SGDOptions(0.01)));
    int64_t parameters = 0;
    for (const auto& p : ddp.parameters()) parameters += p.numel();
    const double payload_mb = payload_bytes(ddp.parameters(), args.comm_hook) / 1e6;
    const engine::model::TensorDict batch = bench::mlp_batch(shape, args.batch);
    std::vector<double> times;
    for (int step = 0; step < args.warmup + args.steps; ++step) {
      dist::barrier();
      const auto start = std::chrono::steady_clock::now();
      ddp.train_step(batch, optim);
      bench::finish_queued_work(device);
      const std::chrono::duration<double, std::milli> took =
          std::chrono::steady_clock::now() - start;
      if (step >= args.warmup) times.push_back(took.count());
    }
    // The slowest rank's median is the job's step time.
    at::Tensor step_ms = at::tensor({bench::median(times)}, at::kDouble);
    dist::all_reduce_anywhere(step_ms, "max");
    const double ms = step_ms.item<double>();
    const int ranks = dist::get_world_size();
    if (dist::is_main_process()) {
      std::printf(
          "ours   %-5s %-5s params %8.2fM ranks %d step %9.2f ms  samples/s %9.1f%s  hook %s "
          "payload %.2f MB\n",
          args.backend.c_str(), args.model.c_str(), parameters / 1e6, ranks, ms,
          1000.0 * args.batch * ranks / ms, args.ddp.gradient_as_bucket_view ? "  view" : "",
          args.comm_hook.c_str(), payload_mb);
    }
  } catch (const std::exception& error) {
    std::cerr << "ddp_step: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
