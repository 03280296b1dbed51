// The strategies' activation_checkpointing key: training with the blocks of
// a model checkpointed ends bit-identical, on every rank, to training without,
// under every strategy, with dropout drawn from the rank's generator (the
// GPU's default one on nccl) and a BatchNorm whose running statistics the recomputation must not
// move twice.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/ops/arange.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/model/base_model.h"
#include "engine/model/batch_norm.h"
#include "engine/model/unit_call.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/registry/registry.h"
#include "engine/strategy/strategy.h"
#include "testing/harness.h"

namespace {

using engine::model::ForwardMode;
using engine::model::TensorDict;
using engine::registry::Json;

constexpr int kWidth = 6;

// Linear, BatchNorm, tanh, dropout drawn from the rank's generator, Linear.
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(at::Generator generator) : Module("Block"), generator_(std::move(generator)) {
    first = register_module("first", torch::nn::Linear(kWidth, 10));
    norm = register_module("norm", engine::model::BatchNorm(engine::model::BatchNormOptions(10)));
    second = register_module("second", torch::nn::Linear(10, kWidth));
  }
  at::Tensor forward(const at::Tensor& x) {
    // `first` through call_unit: a unit when a policy makes Linear layers units.
    at::Tensor h = engine::model::call_unit(
        *first, x, [this](const at::Tensor& in) { return first->forward(in); });
    h = torch::tanh(norm->forward(h));
    if (is_training()) h = h * at::bernoulli(at::full_like(h, 0.5), generator_) * 2;
    return second->forward(h);
  }
  torch::nn::Linear first{nullptr};
  engine::model::BatchNorm norm{nullptr};
  torch::nn::Linear second{nullptr};

 private:
  at::Generator generator_;
};
TORCH_MODULE(Block);

class BlockNet : public engine::model::BaseModel {
 public:
  explicit BlockNet(const at::Generator& generator) {
    for (int b = 0; b < 3; ++b) {
      blocks_.push_back(register_module("block" + std::to_string(b), Block(generator)));
    }
    head_ = register_module("head", torch::nn::Linear(kWidth, 2));
  }
  TensorDict forward(const TensorDict& data, ForwardMode) override {
    at::Tensor x = data.at("inputs");
    for (auto& block : blocks_) {
      BlockImpl* run = block.get();
      x = engine::model::call_unit(*block, x,
                                   [run](const at::Tensor& in) { return run->forward(in); });
    }
    at::Tensor out = engine::model::call_unit(*head_, [&] { return head_->forward(x); });
    return {{"loss", torch::nn::functional::mse_loss(out, data.at("target"))}};
  }

 private:
  std::vector<Block> blocks_;
  torch::nn::Linear head_{nullptr};
};

Json checkpointed_blocks() {
  return {{"check_fn", {{"type", "ModuleWrapPolicy"}, {"module_classes", {"Block"}}}}};
}

struct CheckpointedRun {
  std::string name;
  Json strategy;
  int world_size;
};

std::vector<CheckpointedRun> cases(int ranks) {
  const Json blocks_as_units = {
      {"auto_wrap_policy", {{"type", "ModuleWrapPolicy"}, {"module_classes", {"Block"}}}}};
  auto fsdp = [&](const std::string& sharding, bool units) {
    Json wrapper = units ? blocks_as_units : Json::object();
    wrapper["sharding_strategy"] = sharding;
    return Json{{"type", "FSDPStrategy"}, {"model_wrapper", wrapper}};
  };
  return {
      {"SingleDevice", {{"type", "SingleDeviceStrategy"}}, 1},
      {"DDP", {{"type", "DDPStrategy"}}, ranks},
      {"DDP find_unused_parameters",
       {{"type", "DDPStrategy"}, {"model_wrapper", {{"find_unused_parameters", true}}}},
       ranks},
      {"ZeRO-1", {{"type", "ZeroStrategy"}, {"stage", 1}}, ranks},
      {"ZeRO-2", {{"type", "ZeroStrategy"}, {"stage", 2}}, ranks},
      {"FSDP FULL_SHARD, blocks as units", fsdp("FULL_SHARD", true), ranks},
      {"FSDP SHARD_GRAD_OP, blocks as units", fsdp("SHARD_GRAD_OP", true), ranks},
      {"FSDP NO_SHARD, blocks as units", fsdp("NO_SHARD", true), ranks},
      {"FSDP FULL_SHARD, blocks in the root unit", fsdp("FULL_SHARD", false), ranks},
  };
}

// Dropout's generator: the strategy's on the CPU; on CUDA the device's
// default one, reseeded, which the checkpoint preserves as the default
// generator of its input's device.
at::Generator dropout_generator(engine::strategy::BaseStrategy& strategy) {
  const at::Device device = harness::device();
  if (!device.is_cuda()) return strategy.generator();
  at::Generator generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(3);
  return generator;
}

// Parameters (whole under FSDP) and buffers after three steps, in name
// order, then the paths of the modules that ran checkpointed.
std::vector<at::Tensor> train(Json strategy_config, const Json& activation_checkpointing, int rank,
                              std::vector<std::string>* checkpointed) {
  strategy_config["seed"] = 3;
  strategy_config["seed_process_generator"] = false;  // simulated ranks share the process
  if (!activation_checkpointing.is_null()) {
    strategy_config["activation_checkpointing"] = activation_checkpointing;
  }
  auto strategy = engine::strategy::strategies().build(strategy_config);
  strategy->setup_env();
  auto net = std::make_shared<BlockNet>(dropout_generator(*strategy));
  {
    // The same initial weights on every rank, from a generator no other
    // simulated rank draws from.
    torch::NoGradGuard no_grad;
    auto weights = at::make_generator<at::CPUGeneratorImpl>(17);
    for (auto& param : net->parameters()) param.normal_(0, 0.5, weights);
  }
  net->to(harness::device());
  const auto& prepared = strategy->prepare(
      net, Json{{"optimizer", {{"type", "SGD"}, {"lr", 0.1}, {"momentum", 0.5}}}});
  for (int step = 0; step < 3; ++step) {
    const auto options = at::TensorOptions().device(harness::device());
    const at::Tensor base = at::arange(8 * kWidth, options.dtype(at::kFloat)).view({8, kWidth});
    TensorDict batch = {{"inputs", at::sin(base * (1 + rank + step))},
                        {"target", at::cos(base.narrow(1, 0, 2) * (2 + rank * step))}};
    prepared.model->train_step(batch, *prepared.optim_wrapper);
  }
  std::map<std::string, at::Tensor> state;
  if (auto* fsdp = dynamic_cast<engine::model::MMFullyShardedDataParallel*>(prepared.model.get())) {
    state = fsdp->full_parameters();
  } else {
    for (const auto& item : net->named_parameters()) state[item.key()] = item.value();
  }
  for (const auto& item : net->named_buffers()) state["buffer " + item.key()] = item.value();
  std::vector<at::Tensor> out;
  for (const auto& [name, tensor] : state) out.push_back(tensor.detach().to(at::kCPU).clone());
  if (checkpointed) *checkpointed = strategy->checkpointed_modules();
  return out;
}

TEST(ActivationCheckpointing, EveryStrategyTrainsBitIdenticallyWithAndWithoutIt) {
  const int ranks = harness::max_world_size(3);
  for (const CheckpointedRun& c : cases(ranks)) {
    SCOPED_TRACE(c.name);
    const auto plain = harness::collect_ranks<std::vector<at::Tensor>>(
        c.world_size, [&](int rank) { return train(c.strategy, nullptr, rank, nullptr); });
    std::vector<std::string> checkpointed;
    const auto with = harness::collect_ranks<std::vector<at::Tensor>>(c.world_size, [&](int rank) {
      return train(c.strategy, checkpointed_blocks(), rank, rank == 0 ? &checkpointed : nullptr);
    });
    if (harness::backend() == "sim") {
      EXPECT_EQ(checkpointed, (std::vector<std::string>{"block0", "block1", "block2"}));
    }
    for (int rank = 0; rank < c.world_size; ++rank) {
      ASSERT_EQ(plain[rank].size(), with[rank].size());
      for (size_t i = 0; i < plain[rank].size(); ++i) {
        EXPECT_TRUE(at::equal(plain[rank][i], with[rank][i]))
            << "rank " << rank << ", tensor " << i;
      }
    }
  }
}

TEST(ActivationCheckpointing, ModulePathsAsMmenginesRunnerTakesThem) {
  const auto seen = harness::collect_ranks<std::vector<at::Tensor>>(2, [&](int rank) {
    std::vector<std::string> checkpointed;
    auto state = train({{"type", "DDPStrategy"}}, Json::array({"block1", "block2.second"}), rank,
                       &checkpointed);
    EXPECT_EQ(checkpointed, (std::vector<std::string>{"block1", "block2.second"}));
    return state;
  });
  const auto plain = harness::collect_ranks<std::vector<at::Tensor>>(2, [&](int rank) {
    return train({{"type", "DDPStrategy"}}, nullptr, rank, nullptr);
  });
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < plain[rank].size(); ++i) {
      EXPECT_TRUE(at::equal(plain[rank][i], seen[rank][i])) << "rank " << rank << ", tensor " << i;
    }
  }
}

TEST(ActivationCheckpointing, ABadSelectionIsRefusedOnEveryRank) {
  for (const Json& bad :
       {Json::array({"block9"}),
        Json{{"check_fn", {{"type", "ModuleWrapPolicy"}, {"module_classes", {"Conv2d"}}}}}}) {
    harness::run_ranks(2, [&](int rank) {
      EXPECT_THROW(train({{"type", "DDPStrategy"}}, bad, rank, nullptr),
                   engine::dist::InvalidArgument)
          << bad.dump();
    });
  }
  for (const Json& malformed :
       {Json("Block"), Json{{"check_fn", {{"type", "size_based_auto_wrap_policy"}}}},
        Json{{"check_fn", {{"type", "ModuleWrapPolicy"}, {"module_classes", {"Block"}}}},
             {"preserve_rng_stat", true}}}) {
    Json config = {{"type", "DDPStrategy"}, {"activation_checkpointing", malformed}};
    EXPECT_THROW(engine::strategy::strategies().build(config), engine::registry::ConfigError)
        << malformed.dump();
  }
}

TEST(ActivationCheckpointing, AUnitInsideACheckpointedModuleIsRefusedOnEveryRank) {
  // Units are the Linear layers; the checkpointed blocks hold them.
  const Json fsdp = {
      {"type", "FSDPStrategy"},
      {"model_wrapper",
       {{"auto_wrap_policy", {{"type", "ModuleWrapPolicy"}, {"module_classes", {"Linear"}}}}}}};
  harness::run_ranks(2, [&](int rank) {
    try {
      train(fsdp, checkpointed_blocks(), rank, nullptr);
      ADD_FAILURE() << "a unit inside a checkpointed block was accepted";
    } catch (const engine::dist::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("Linear"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
