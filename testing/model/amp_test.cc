// AmpOptimWrapper over ranks: an overflow that one rank's gradient holds
// skips the step on every rank and backs the scale off on every rank,
// however the gradients are spread (replicated under DDP, sharded under ZeRO
// and FSDP); the next step runs exactly. Values are powers of two and small
// integers, so every scaled, reduced and unscaled gradient is exact. On nccl
// the model is on the rank's GPU and autocast is float16.
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tensor.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/model/wrappers/zero_data_parallel.h"
#include "engine/optim/amp_optim_wrapper.h"
#include "testing/harness.h"

namespace {

using engine::model::BaseModel;
using engine::model::ForwardMode;
using engine::model::TensorDict;

constexpr int64_t kElements = 4;  // the norm of a constant gradient, 2 * it, is exact

// loss = sum(w * x): the gradient of w is x.
class Dot : public BaseModel {
 public:
  Dot() { w = register_parameter("w", at::ones({kElements})); }
  TensorDict forward(const TensorDict& data, ForwardMode) override {
    return {{"loss", (w * data.at("x")).sum()}};
  }
  at::Tensor w;
};

enum class Wrap { kDdp, kZero1, kZero2, kFullShard, kShardGradOp, kNoShard };

std::string name_of(Wrap wrap) {
  switch (wrap) {
    case Wrap::kDdp:
      return "DDP";
    case Wrap::kZero1:
      return "ZeRO-1";
    case Wrap::kZero2:
      return "ZeRO-2";
    case Wrap::kFullShard:
      return "FULL_SHARD";
    case Wrap::kShardGradOp:
      return "SHARD_GRAD_OP";
    case Wrap::kNoShard:
      return "NO_SHARD";
  }
  return "?";
}

std::shared_ptr<BaseModel> wrapped(Wrap wrap, std::shared_ptr<Dot> dot) {
  using namespace engine::model;
  switch (wrap) {
    case Wrap::kDdp:
      return std::make_shared<MMDistributedDataParallel>(dot);
    case Wrap::kZero1:
    case Wrap::kZero2: {
      ZeroOptions options;
      options.stage = wrap == Wrap::kZero1 ? 1 : 2;
      return std::make_shared<MMZeroDataParallel>(dot, options);
    }
    default: {
      FSDPOptions options;
      options.sharding_strategy = wrap == Wrap::kFullShard     ? ShardingStrategy::kFullShard
                                  : wrap == Wrap::kShardGradOp ? ShardingStrategy::kShardGradOp
                                                               : ShardingStrategy::kNoShard;
      return std::make_shared<MMFullyShardedDataParallel>(dot, options);
    }
  }
}

at::Tensor full_w(const std::shared_ptr<BaseModel>& model, const Dot& dot) {
  if (auto* fsdp = dynamic_cast<engine::model::MMFullyShardedDataParallel*>(model.get()))
    return fsdp->full_parameters().at("w").to(at::kCPU);
  return dot.w.detach().to(at::kCPU).clone();
}

// What one rank saw over two steps: skipped, scale, w after the first (whose
// x on rank 0 overflows in the last element, a shard other ranks own), then
// skipped, scale, growth tracker, clipping's norm and w after a plain one.
// On the harness's device: autocast to float16 on CUDA (nccl), bfloat16 on
// the CPU.
at::Tensor two_steps(Wrap wrap, int rank) {
  const at::Device device = harness::device();
  auto dot = std::make_shared<Dot>();
  dot->to(device);
  auto model = wrapped(wrap, dot);
  auto sgd =
      std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.5));
  engine::optim::OptimWrapperOptions options;
  options.clip_grad = engine::optim::ClipGrad{};
  options.clip_grad->max_norm = 1e9;  // measures the norm, clips nothing
  engine::optim::LossScalerOptions scaler;
  scaler.growth_interval = 4;
  engine::optim::AmpOptimWrapper optim(sgd, options,
                                       {device.is_cuda() ? at::kHalf : at::kBFloat16, scaler});

  at::Tensor overflowing = at::ones({kElements});
  if (rank == 0) overflowing[kElements - 1] = 1e36;
  overflowing = overflowing.to(device);
  model->train_step({{"x", overflowing}}, optim);
  std::vector<at::Tensor> seen = {
      at::tensor({optim.last_step_skipped() ? 1.0 : 0.0, double(optim.loss_scaler()->scale()),
                  optim.last_grad_norm() ? 1.0 : 0.0}),
      full_w(model, *dot).to(at::kDouble)};
  model->train_step({{"x", at::full({kElements}, 1.0 + rank, device)}}, optim);
  seen.push_back(at::tensor(
      {optim.last_step_skipped() ? 1.0 : 0.0, double(optim.loss_scaler()->scale()),
       double(optim.loss_scaler()->growth_tracker()), optim.last_grad_norm().value_or(-1)}));
  seen.push_back(full_w(model, *dot).to(at::kDouble));
  return at::cat(seen);
}

TEST(AmpOverRanks, AnOverflowOnOneRankSkipsTheStepEverywhereAndTheNextStepIsExact) {
  const int ranks = harness::max_world_size(4);
  ASSERT_GE(ranks, 2);
  const double mean = 1 + (ranks - 1) / 2.0;  // of 1 + rank
  std::vector<at::Tensor> expected = {at::tensor({1.0, 32768.0, 0.0}),
                                      at::ones({kElements}, at::kDouble),
                                      at::tensor({0.0, 32768.0, 1.0, 2 * mean}),
                                      at::full({kElements}, 1 - 0.5 * mean, at::kDouble)};
  const at::Tensor want = at::cat(expected);
  for (Wrap wrap : {Wrap::kDdp, Wrap::kZero1, Wrap::kZero2, Wrap::kFullShard, Wrap::kShardGradOp,
                    Wrap::kNoShard}) {
    const auto seen =
        harness::collect_ranks<at::Tensor>(ranks, [&](int rank) { return two_steps(wrap, rank); });
    for (int rank = 0; rank < ranks; ++rank) {
      EXPECT_TRUE(at::equal(seen[rank], want))
          << name_of(wrap) << ", rank " << rank << ": " << seen[rank] << "\nwanted " << want;
    }
  }
}

}  // namespace
