// What activation checkpointing saves and costs on one process: a model of
// residual MLP blocks (x + W2 gelu(W1 x), hidden 4 x width), trained by
// SingleDeviceStrategy with its blocks checkpointed or not. Prints, for the
// run: the bytes the forward leaves allocated for the backward (malloc's
// count after the forward less before it: activations and the loss), the
// process's peak RSS, and the median step time. Peak RSS is the process's
// high-water mark, so each mode runs in a process of its own
// (run_activation_memory.sh alternates them).
//
//   activation_memory --checkpoint 1 --width 2048 --blocks 3 --batch 1024
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <malloc.h>
#include <sys/resource.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/base_model.h"
#include "engine/model/unit_call.h"
#include "engine/registry/registry.h"
#include "engine/strategy/strategy.h"
#include "tools/bench/flags.h"

namespace {

using engine::model::TensorDict;
using engine::registry::Json;

class ResidualBlockImpl : public torch::nn::Module {
 public:
  explicit ResidualBlockImpl(int64_t width) : Module("ResidualBlock") {
    up = register_module("up", torch::nn::Linear(width, 4 * width));
    down = register_module("down", torch::nn::Linear(4 * width, width));
  }
  at::Tensor forward(const at::Tensor& x) {
    return x + down->forward(torch::nn::functional::gelu(up->forward(x)));
  }
  torch::nn::Linear up{nullptr};
  torch::nn::Linear down{nullptr};
};
TORCH_MODULE(ResidualBlock);

class ResidualMlp : public engine::model::BaseModel {
 public:
  ResidualMlp(int64_t width, int blocks) {
    for (int b = 0; b < blocks; ++b) {
      blocks_.push_back(register_module("block" + std::to_string(b), ResidualBlock(width)));
    }
    head_ = register_module("head", torch::nn::Linear(width, 10));
  }
  TensorDict forward(const TensorDict& data, engine::model::ForwardMode) override {
    at::Tensor x = data.at("inputs");
    for (auto& block : blocks_) {
      ResidualBlockImpl* run = block.get();
      x = engine::model::call_unit(*block, x,
                                   [run](const at::Tensor& in) { return run->forward(in); });
    }
    return {{"loss", torch::nn::functional::cross_entropy(head_->forward(x), data.at("labels"))}};
  }

 private:
  std::vector<ResidualBlock> blocks_;
  torch::nn::Linear head_{nullptr};
};

int64_t malloc_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

int64_t peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

struct Flags {
  bool checkpoint = false;
  int64_t width = 2048;
  int blocks = 3;
  int64_t batch = 1024;
  int steps = 4;
  int warmup = 1;
};

constexpr const char* kUsage =
    "usage: activation_memory [--checkpoint 0|1] [--width N] [--blocks N] [--batch N]\n"
    "                         [--steps N] [--warmup N]\n";

Flags parse(int argc, char** argv) {
  Flags flags;
  auto usage = [](const std::string& problem) {
    bench::exit_with_usage("activation_memory", problem, kUsage);
  };
  bench::for_each_flag(argc, argv, usage, [&](const std::string& flag, const std::string& value) {
    if (flag == "--checkpoint") {
      flags.checkpoint = value == "1";
    } else if (flag == "--width") {
      flags.width = std::stoll(value);
    } else if (flag == "--blocks") {
      flags.blocks = std::stoi(value);
    } else if (flag == "--batch") {
      flags.batch = std::stoll(value);
    } else if (flag == "--steps") {
      flags.steps = std::stoi(value);
    } else if (flag == "--warmup") {
      flags.warmup = std::stoi(value);
    } else {
      usage("unknown flag " + flag);
    }
  });
  if (flags.steps < 1 || flags.width < 1 || flags.blocks < 1) usage("sizes must be positive");
  return flags;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse(argc, argv);
  Json config = {{"type", "SingleDeviceStrategy"}, {"seed", 1}};
  if (flags.checkpoint) {
    config["activation_checkpointing"] = {
        {"check_fn", {{"type", "ModuleWrapPolicy"}, {"module_classes", {"ResidualBlock"}}}}};
  }
  auto strategy = engine::strategy::strategies().build(config);
  strategy->setup_env();
  auto model = std::make_shared<ResidualMlp>(flags.width, flags.blocks);
  const auto& prepared =
      strategy->prepare(model, Json{{"optimizer", {{"type", "SGD"}, {"lr", 0.01}}}});
  int64_t parameters = 0;
  for (const auto& param : model->parameters()) parameters += param.numel();

  const TensorDict batch = {{"inputs", at::randn({flags.batch, flags.width})},
                            {"labels", at::randint(10, {flags.batch}, at::kLong)}};
  std::vector<double> seconds;
  int64_t held = 0;
  for (int step = 0; step < flags.warmup + flags.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    prepared.optim_wrapper->zero_grad();
    const int64_t before = malloc_in_use();
    const TensorDict losses = model->forward(batch, engine::model::ForwardMode::kLoss);
    held = malloc_in_use() - before;
    prepared.optim_wrapper->update_params(losses.at("loss"));
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (step >= flags.warmup) seconds.push_back(took.count());
  }
  std::sort(seconds.begin(), seconds.end());
  std::printf(
      "checkpoint=%d parameters=%lld batch=%lld held_after_forward_mib=%.1f "
      "peak_rss_mib=%.1f median_step_s=%.3f checkpointed=%zu\n",
      flags.checkpoint ? 1 : 0, static_cast<long long>(parameters),
      static_cast<long long>(flags.batch), held / 1048576.0, peak_rss_bytes() / 1048576.0,
      seconds[seconds.size() / 2], strategy->checkpointed_modules().size());
  return 0;
}
