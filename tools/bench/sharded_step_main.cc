// The sharded-training step benchmark: one training step (forward,
// backward, Adam step) of the benchmarks' MLP under DDP, ZeRO-1, ZeRO-2,
// FULL_SHARD or SHARD_GRAD_OP (each Linear a unit), batch 64 per rank, one
// intra-op thread per rank. Rank 0 prints one line: the slowest rank's
// median step time over --steps steps after --warmup, the model-state bytes
// a rank holds after a step (parameters, gradients and Adam's state, as the
// wrappers account them) also per parameter, the peak of gathered
// parameters over the timed steps, and the largest peak RSS of the ranks
// (the whole run's, warmup included).
//
//   engine-launch --nproc-per-node 2 sharded_step --backend gloo --strategy zero2
//   mpirun -n 2 sharded_step --backend mpi --model xl --strategy full_shard
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/tensor.h>
#include <sys/resource.h>
#include <torch/optim/adam.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "engine/dist/dist.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/model/wrappers/zero_data_parallel.h"
#include "engine/optim/builders.h"
#include "engine/optim/fused_adam.h"
#include "engine/optim/optim_wrapper.h"
#include "tools/bench/flags.h"
#include "tools/bench/mlp.h"
#include "tools/bench/sweep.h"

namespace {

namespace dist = engine::dist;
using engine::model::ModelWrapper;

const std::vector<std::string> kStrategies = {"ddp", "zero1", "zero2", "full_shard",
                                              "shard_grad_op"};

struct Args : bench::StepFlags {
  Args() { model = "large"; }
  std::string strategy = "ddp";
  // ZeRO's reduce_bucket_size: one 2048 x 2048 layer (16 MiB of float32),
  // so that a bucket's reduce-scatter starts after one layer's backward.
  int64_t bucket_elements = 1 << 22;
  // FSDP's prefetching (full_shard, shard_grad_op).
  std::string backward_prefetch = "BACKWARD_PRE";
  bool forward_prefetch = false;
  // "fused" (ATen's fused kernel, as PyTorch's fused=True) where this
  // LibTorch has it for the device, else "loop" (LibTorch's Adam).
  std::string adam;
};

[[noreturn]] void usage(const std::string& problem) {
  bench::exit_with_usage(
      "sharded_step", problem,
      "usage: sharded_step [--backend gloo|mpi|nccl] [--model small|large|xl]\n"
      "                    [--strategy ddp|zero1|zero2|full_shard|shard_grad_op]\n"
      "                    [--batch N] [--steps N] [--warmup N] [--bucket-elements N]\n"
      "                    [--backward-prefetch BACKWARD_PRE|BACKWARD_POST|NONE]\n"
      "                    [--forward-prefetch 0|1] [--adam fused|loop]\n"
      "                    (under engine-launch or mpirun)\n");
}

Args parse(int argc, char** argv) {
  Args args;
  bench::for_each_flag(argc, argv, usage, [&](const std::string& flag, const std::string& value) {
    if (bench::take_step_flag(args, flag, value)) return;
    if (flag == "--strategy") {
      args.strategy = value;
    } else if (flag == "--bucket-elements") {
      args.bucket_elements = std::stoll(value);
    } else if (flag == "--backward-prefetch") {
      args.backward_prefetch = value;
    } else if (flag == "--adam") {
      args.adam = value;
    } else if (flag == "--forward-prefetch") {
      args.forward_prefetch = value == "1";
    } else {
      usage("unknown flag " + flag);
    }
  });
  if (bench::mlp_shape(args.model).width == 0) usage("--model is small, large or xl");
  if (std::find(kStrategies.begin(), kStrategies.end(), args.strategy) == kStrategies.end()) {
    usage("unknown --strategy " + args.strategy);
  }
  if (!args.adam.empty() && args.adam != "fused" && args.adam != "loop") {
    usage("--adam is fused or loop");
  }
  return args;
}

// On the device the collectives take (the rank's GPU on nccl): DDP and ZeRO
// train the module where it is, FSDP moves it to device_id.
std::shared_ptr<ModelWrapper> wrap(const Args& args, std::shared_ptr<bench::Mlp> model,
                                   at::Device device) {
  if (args.strategy != "full_shard" && args.strategy != "shard_grad_op") model->to(device);
  if (args.strategy == "ddp") {
    return std::make_shared<engine::model::MMDistributedDataParallel>(model);
  }
  if (args.strategy == "zero1" || args.strategy == "zero2") {
    engine::model::ZeroOptions options;
    options.stage = args.strategy == "zero1" ? 1 : 2;
    options.reduce_bucket_size = args.bucket_elements;
    options.overlap_comm = true;
    return std::make_shared<engine::model::MMZeroDataParallel>(model, options);
  }
  engine::model::FSDPOptions options;
  options.sharding_strategy = engine::model::parse_sharding_strategy(args.strategy);
  options.auto_wrap_policy.module_types = {"Linear"};
  options.backward_prefetch = engine::model::parse_backward_prefetch(args.backward_prefetch);
  options.forward_prefetch = args.forward_prefetch;
  options.device_id = device;
  return std::make_shared<engine::model::MMFullyShardedDataParallel>(model, options);
}

int64_t bytes_of(const at::Tensor& tensor) {
  return tensor.defined() ? static_cast<int64_t>(tensor.nbytes()) : 0;
}

int64_t adam_state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& entry : optimizer.state()) {
    const auto& state = static_cast<const torch::optim::AdamParamState&>(*entry.second);
    bytes +=
        bytes_of(state.exp_avg()) + bytes_of(state.exp_avg_sq()) + bytes_of(state.max_exp_avg_sq());
  }
  return bytes;
}

struct Held {
  int64_t model_state = 0;
  int64_t gathered_peak = 0;
  int64_t kept_for_reuse = 0;
};

Held held_by(ModelWrapper& wrapper, const torch::optim::Optimizer& optimizer) {
  Held held;
  held.model_state = adam_state_bytes(optimizer);
  if (auto* sharded = dynamic_cast<engine::model::MMFullyShardedDataParallel*>(&wrapper)) {
    const auto memory = sharded->memory();
    held.model_state += memory.sharded_parameters + memory.gathered_now + memory.sharded_gradients +
                        memory.unsharded_gradients;
    held.gathered_peak = memory.gathered_peak;
    held.kept_for_reuse = memory.kept_for_reuse;
    return held;
  }
  for (const auto& param : wrapper.parameters()) {
    held.model_state += bytes_of(param) + bytes_of(param.grad());
  }
  return held;
}

// The largest value over the ranks.
double max_over_ranks(double value) {
  at::Tensor tensor = at::tensor({value}, at::kDouble);
  dist::all_reduce_anywhere(tensor, "max");
  return tensor.item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  at::set_num_threads(1);
  try {
    dist::init_dist(args.backend == "mpi" ? "mpi" : "pytorch", args.backend);
    const bench::MlpShape shape = bench::mlp_shape(args.model);
    auto model = std::make_shared<bench::Mlp>(shape);
    int64_t parameters = 0;
    for (const auto& p : model->parameters()) parameters += p.numel();
    const at::Device device = dist::get_comm_device();
    auto wrapper = wrap(args, model, device);
    const std::string adam = !args.adam.empty()                                          ? args.adam
                             : engine::optim::fused_adam_available(device.type(), false) ? "fused"
                                                                                         : "loop";
    engine::optim::OptimWrapper optim(engine::optim::optimizers().build(
        {{"type", "Adam"}, {"lr", 1e-4}, {"fused", adam == "fused"}}, wrapper->parameters()));
    const engine::model::TensorDict batch = bench::mlp_batch(shape, args.batch);
    std::vector<double> times;
    auto* sharded = dynamic_cast<engine::model::MMFullyShardedDataParallel*>(wrapper.get());
    for (int step = 0; step < args.warmup + args.steps; ++step) {
      // The first steps gather the units the model has not yet run through
      // call_unit together with the root: the peak counts the steady state.
      if (step == args.warmup && sharded) sharded->reset_peak_memory();
      dist::barrier();
      const auto start = std::chrono::steady_clock::now();
      wrapper->train_step(batch, optim);
      bench::finish_queued_work(device);
      const std::chrono::duration<double, std::milli> took =
          std::chrono::steady_clock::now() - start;
      if (step >= args.warmup) times.push_back(took.count());
    }
    const double ms = max_over_ranks(bench::median(times));
    const Held held = held_by(*wrapper, optim.optimizer());
    const double state_mb = max_over_ranks(held.model_state / 1e6);
    const double gathered_mb = max_over_ranks(held.gathered_peak / 1e6);
    const double kept_mb = max_over_ranks(held.kept_for_reuse / 1e6);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const double rss_mb = max_over_ranks(usage.ru_maxrss / 1e3);  // ru_maxrss is in KiB
    const std::string prefetch =
        sharded && args.strategy != "zero1" && args.strategy != "zero2"
            ? "  prefetch " + args.backward_prefetch + (args.forward_prefetch ? "+forward" : "")
            : "";
    if (dist::is_main_process()) {
      std::printf(
          "ours %-4s %-5s %-13s params %6.1fM ranks %d step %9.1f ms  model-state %8.1f MB "
          "(%5.2f B/param)  gathered-peak %7.1f MB  kept %7.1f MB  adam %-5s  peak-rss %7.0f "
          "MB%s\n",
          args.backend.c_str(), args.model.c_str(), args.strategy.c_str(), parameters / 1e6,
          dist::get_world_size(), ms, state_mb, state_mb * 1e6 / parameters, gathered_mb, kept_mb,
          adam.c_str(), rss_mb, prefetch.c_str());
    }
  } catch (const std::exception& error) {
    std::cerr << "sharded_step: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
