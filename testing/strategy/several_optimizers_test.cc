// Several optimizer wrappers (mmengine's OptimWrapperDict) through the
// strategies: a GAN-shaped model steps its generator and its discriminator
// with wrappers of their own, under SingleDeviceStrategy and under
// DDPStrategy with MMSeparateDistributedDataParallel (in the simulator and
// in processes); ranks train as one process on their batches together, a
// resumed run ends bit-identical to the one that saved, and each mistake is
// a typed error on every rank.
#include <ATen/ops/allclose.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/stack.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/optimizer.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint/file.h"
#include "engine/dist/errors.h"
#include "engine/io/file_system.h"
#include "engine/model/base_model.h"
#include "engine/optim/grad_sync.h"
#include "engine/optim/optim_wrapper_dict.h"
#include "engine/registry/registry.h"
#include "engine/runner/runner.h"
#include "engine/strategy/strategy.h"
#include "testing/harness.h"

namespace {

using engine::model::ForwardMode;
using engine::model::TensorDict;
using engine::optim::OptimWrapperDict;
using engine::registry::ConfigError;
using engine::registry::Json;

// The discriminator learns to tell real samples from generated ones by a
// squared score; the generator learns to raise the score of its samples,
// through the discriminator's weights as they are (not its parameters, as
// mmengine's GANs freeze it), so each backward reaches one part only.
class TinyGan : public engine::model::BaseModel {
 public:
  TinyGan() {
    generator = register_module("generator", torch::nn::Linear(3, 3));
    discriminator = register_module("discriminator", torch::nn::Linear(3, 1));
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (auto& param : parameters()) {
      param.copy_(at::linspace(-0.5, 0.5, param.numel()).view(param.sizes()) + 0.1 * offset++);
    }
    to(at::kDouble);
  }
  TensorDict forward(const TensorDict& data, ForwardMode mode) override {
    const at::Tensor generated = generator->forward(data.at("noise"));
    if (mode == ForwardMode::kLoss) return {{"loss", generated.pow(2).mean()}};
    return {{"generated", generated}};
  }
  TensorDict train_step(const TensorDict& data, OptimWrapperDict& wrappers) override {
    auto& for_discriminator = wrappers.at("discriminator");
    at::Tensor loss_d;
    {
      auto scope =
          for_discriminator.optim_context(engine::optim::grad_sync_of(discriminator.get()));
      const at::Tensor fake = generator->forward(data.at("noise")).detach();
      loss_d = discriminator->forward(fake).pow(2).mean() -
               discriminator->forward(data.at("real")).mean();
      for_discriminator.update_params(loss_d);
    }
    auto& for_generator = wrappers.at("generator");
    at::Tensor loss_g;
    {
      auto scope = for_generator.optim_context(engine::optim::grad_sync_of(generator.get()));
      const at::Tensor score = torch::nn::functional::linear(generator->forward(data.at("noise")),
                                                             discriminator->weight.detach(),
                                                             discriminator->bias.detach());
      loss_g = (score - 1).pow(2).mean();
      for_generator.update_params(loss_g);
    }
    return {{"loss_d", loss_d.detach()}, {"loss_g", loss_g.detach()}};
  }
  torch::nn::Linear generator{nullptr};
  torch::nn::Linear discriminator{nullptr};
};

// The same parts trained as one model: no train_step for several wrappers.
class OneOptimizerGan : public engine::model::BaseModel {
 public:
  OneOptimizerGan() {
    generator = register_module("generator", torch::nn::Linear(3, 3));
    discriminator = register_module("discriminator", torch::nn::Linear(3, 1));
    to(at::kDouble);
  }
  TensorDict forward(const TensorDict& data, ForwardMode) override {
    return {{"loss", discriminator->forward(generator->forward(data.at("noise"))).pow(2).mean()}};
  }
  torch::nn::Linear generator{nullptr};
  torch::nn::Linear discriminator{nullptr};
};

// Both wrappers: SGD with momentum for the generator, Adam for the
// discriminator (optimizer state of two kinds to save and restore).
Json two_wrappers() {
  return {{"generator", {{"optimizer", {{"type", "SGD"}, {"lr", 0.1}, {"momentum", 0.9}}}}},
          {"discriminator", {{"optimizer", {{"type", "Adam"}, {"lr", 0.01}}}}}};
}

// Each wrapper's own schedule, keyed by its name as mmengine keys them.
Json two_schedules() {
  return {{"generator", {{"type", "MultiStepLR"}, {"milestones", {1}}, {"gamma", 0.5}}},
          {"discriminator", {{"type", "MultiStepLR"}, {"milestones", {3}}, {"gamma", 0.25}}}};
}

double lr_of(engine::optim::OptimWrapper& wrapper) {
  return wrapper.optimizer().param_groups()[0].options().get_lr();
}

Json ddp_separate() {
  return {{"type", "DDPStrategy"},
          {"seed", 1},
          {"seed_process_generator", false},
          {"model_wrapper", {{"type", "MMSeparateDistributedDataParallel"}}}};
}

// Step `step`'s batch of `rank` (4 samples each).
TensorDict batch(int step, int rank) {
  const double shift = 0.25 * step + 0.5 * rank;
  const auto options = at::TensorOptions().dtype(at::kDouble);
  return {{"noise", at::linspace(-1, 1, 12, options).view({4, 3}) * (1 + shift)},
          {"real", at::linspace(0.5, 2, 12, options).view({4, 3}) - shift}};
}

TensorDict joined(const std::vector<TensorDict>& batches) {
  TensorDict out;
  for (const char* key : {"noise", "real"}) {
    std::vector<at::Tensor> parts;
    for (const auto& b : batches) parts.push_back(b.at(key));
    out[key] = at::cat(parts);
  }
  return out;
}

std::vector<at::Tensor> parameters_of(engine::strategy::BaseStrategy& strategy) {
  std::vector<at::Tensor> out;
  for (const auto& param : strategy.module().parameters()) out.push_back(param.detach().clone());
  return out;
}

std::string fresh_path(const std::string& name) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "several_optimizers" / name;
  harness::once_for_all_processes([&] {
    engine::io::remove_all(path);
    std::filesystem::create_directories(path.parent_path());
  });
  return path.string();
}

TEST(SeveralOptimizers, RanksTrainAsOneProcessOnTheirBatchesTogether) {
  constexpr int kSteps = 3;
  const int world = harness::max_world_size(3);
  auto single = engine::strategy::strategies().build({{"type", "SingleDeviceStrategy"}});
  const auto& alone = single->prepare(std::make_shared<TinyGan>(), two_wrappers());
  ASSERT_EQ(alone.optim_wrapper, nullptr);
  ASSERT_NE(alone.optim_wrappers, nullptr);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<TensorDict> batches;
    for (int rank = 0; rank < world; ++rank) batches.push_back(batch(step, rank));
    alone.model->train_step(joined(batches), *alone.optim_wrappers);
  }
  const auto expected = parameters_of(*single);

  const auto seen = harness::collect_ranks<std::vector<at::Tensor>>(world, [&](int rank) {
    auto strategy = engine::strategy::strategies().build(ddp_separate());
    const auto& parts = strategy->prepare(std::make_shared<TinyGan>(), two_wrappers());
    for (int step = 0; step < kSteps; ++step) {
      parts.model->train_step(batch(step, rank), *parts.optim_wrappers);
    }
    return parameters_of(*strategy);
  });
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(seen[rank].size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(at::allclose(seen[rank][i], expected[i], 1e-10, 1e-12))
          << "rank " << rank << ", parameter " << i << ": " << seen[rank][i] << "\nwanted "
          << expected[i];
      EXPECT_TRUE(at::equal(seen[rank][i], seen[0][i])) << "rank " << rank << ", parameter " << i;
    }
  }
}

// Each wrapper follows its own schedule, and a run resumed between the two
// milestones ends bit-identical to the one that saved: optimizer states and
// schedules come back per wrapper.
TEST(SeveralOptimizers, AResumedRunEndsAsTheRunThatSaved) {
  const int world = harness::max_world_size(2);
  const std::string path = fresh_path("gan.pth");
  auto train = [&](const engine::strategy::Prepared& parts, int rank, int from, int to) {
    for (int step = from; step < to; ++step) {
      parts.model->train_step(batch(step, rank), *parts.optim_wrappers);
      for (const auto& item : parts.param_schedulers) item.second->step();
    }
  };
  const auto saving = harness::collect_ranks<std::vector<at::Tensor>>(world, [&](int rank) {
    auto strategy = engine::strategy::strategies().build(ddp_separate());
    const auto& parts =
        strategy->prepare(std::make_shared<TinyGan>(), two_wrappers(), two_schedules());
    train(parts, rank, 0, 2);
    EXPECT_EQ(lr_of(parts.optim_wrappers->at("generator")), 0.05) << "its milestone passed";
    EXPECT_EQ(lr_of(parts.optim_wrappers->at("discriminator")), 0.01) << "its milestone to come";
    strategy->save_checkpoint(path, {2, 0});
    train(parts, rank, 2, 4);
    EXPECT_EQ(lr_of(parts.optim_wrappers->at("discriminator")), 0.0025);
    return parameters_of(*strategy);
  });
  const auto resumed = harness::collect_ranks<std::vector<at::Tensor>>(world, [&](int rank) {
    auto strategy = engine::strategy::strategies().build(ddp_separate());
    const auto& parts =
        strategy->prepare(std::make_shared<TinyGan>(), two_wrappers(), two_schedules());
    EXPECT_EQ(strategy->resume(path).progress.iter, 2);
    train(parts, rank, 2, 4);
    return parameters_of(*strategy);
  });
  for (int rank = 0; rank < world; ++rank) {
    for (size_t i = 0; i < saving[rank].size(); ++i) {
      EXPECT_TRUE(at::equal(resumed[rank][i], saving[rank][i]))
          << "rank " << rank << ", parameter " << i;
    }
  }
  // The file keeps each wrapper's optimizer state under its name.
  const auto optimizer = engine::checkpoint::load_file(path).toGenericDict().at("optimizer");
  ASSERT_TRUE(optimizer.isGenericDict());
  EXPECT_TRUE(optimizer.toGenericDict().contains("generator"));
  EXPECT_TRUE(optimizer.toGenericDict().contains("discriminator"));
}

// TinyGan's samples, one noise row and one real row per index.
class GanData : public engine::runner::Dataset {
 public:
  int64_t size() const override { return 24; }
  TensorDict batch(const std::vector<int64_t>& indices, at::Generator*) const override {
    const auto options = at::TensorOptions().dtype(at::kDouble);
    std::vector<at::Tensor> noise, real;
    for (int64_t i : indices) {
      noise.push_back(at::linspace(-1, 1, 3, options) * (1 + 0.1 * i));
      real.push_back(at::linspace(0.5, 2, 3, options) - 0.05 * i);
    }
    return {{"noise", at::stack(noise)}, {"real", at::stack(real)}};
  }
};

// The runner steps both wrappers and both schedulers (one config built for
// each), and a run it resumes from its own checkpoint ends as the run that
// wrote it.
TEST(SeveralOptimizers, TheRunnerTrainsAndResumesWithThem) {
  const int world = harness::max_world_size(2);
  const std::string first_dir = fresh_path("runner_first");
  const std::string second_dir = fresh_path("runner_second");
  auto run = [&](const std::string& dir, std::optional<std::string> resume_from) {
    engine::runner::RunnerOptions options;
    options.max_iters = 4;
    options.batch_size = 3;
    options.checkpoint_interval = 2;
    options.work_dir = dir;
    options.resume_from = std::move(resume_from);
    options.quiet = true;
    auto data = std::make_shared<GanData>();
    engine::runner::Runner runner(
        engine::strategy::strategies().build(ddp_separate()), std::make_shared<TinyGan>(),
        two_wrappers(), Json{{"type", "MultiStepLR"}, {"milestones", {2}}, {"gamma", 0.5}}, data,
        data,
        [](const std::vector<c10::IValue>& samples) {
          return std::map<std::string, double>{{"samples", static_cast<double>(samples.size())}};
        },
        options);
    const auto result = runner.train();
    EXPECT_EQ(result.last_log.count("loss_d") + result.last_log.count("loss_g"), 2u);
    EXPECT_EQ(result.metrics.at("samples"), 24);
    auto& wrappers = *runner.strategy().prepared().optim_wrappers;
    EXPECT_EQ(lr_of(wrappers.at("generator")), 0.05);
    EXPECT_EQ(lr_of(wrappers.at("discriminator")), 0.005);
    return std::make_pair(parameters_of(runner.strategy()), result.checkpoints);
  };
  const auto first = harness::collect_ranks<std::vector<at::Tensor>>(world, [&](int) {
    const auto [parameters, written] = run(first_dir, std::nullopt);
    EXPECT_EQ(written.size(), 2u) << "at iterations 2 and 4";
    return parameters;
  });
  const std::string second_iteration = (std::filesystem::path(first_dir) / "iter_2.pth").string();
  const auto second = harness::collect_ranks<std::vector<at::Tensor>>(
      world, [&](int) { return run(second_dir, second_iteration).first; });
  for (int rank = 0; rank < world; ++rank) {
    for (size_t i = 0; i < first[rank].size(); ++i) {
      EXPECT_TRUE(at::equal(second[rank][i], first[rank][i])) << "rank " << rank << ", " << i;
    }
  }
}

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const ConfigError& error) {
    return error.what();
  } catch (const engine::dist::DistError& error) {
    return error.what();
  }
  return "no error";
}

TEST(SeveralOptimizers, MistakesAreTypedErrorsThatSayWhat) {
  const std::string single_file = fresh_path("one_wrapper.pth");
  harness::run_ranks(2, [&](int rank) {
    auto prepare = [](const Json& strategy, const Json& optim_wrapper,
                      const std::optional<Json>& scheduler = std::nullopt) {
      engine::strategy::strategies().build(strategy)->prepare(std::make_shared<TinyGan>(),
                                                              optim_wrapper, scheduler);
    };
    Json unknown = two_wrappers();
    unknown["critic"] = unknown["discriminator"];
    EXPECT_NE(error_of([&] { prepare(ddp_separate(), unknown); })
                  .find("\"critic\" names no child module of the model (its children: "
                        "generator, discriminator)"),
              std::string::npos);
    EXPECT_NE(
        error_of([&] {
          prepare({{"type", "FSDPStrategy"}, {"seed_process_generator", false}}, two_wrappers());
        }).find("takes one optimizer wrapper"),
        std::string::npos);
    Json misnamed = two_schedules();
    misnamed["critic"] = misnamed["discriminator"];
    EXPECT_NE(error_of([&] {
                prepare(ddp_separate(), two_wrappers(), misnamed);
              }).find("param_scheduler: \"critic\" is no optimizer wrapper's name"),
              std::string::npos);
    Json one_short = two_schedules();
    one_short.erase("discriminator");
    EXPECT_NE(error_of([&] {
                prepare(ddp_separate(), two_wrappers(), one_short);
              }).find("has no scheduler for the optimizer wrapper \"discriminator\""),
              std::string::npos);

    // A model that trains with one wrapper, given several.
    auto plain = engine::strategy::strategies().build(ddp_separate());
    const auto& plain_parts = plain->prepare(std::make_shared<OneOptimizerGan>(), two_wrappers());
    EXPECT_NE(error_of([&] {
                plain_parts.model->train_step(batch(0, rank), *plain_parts.optim_wrappers);
              }).find("trains with one optimizer wrapper, but optim_wrapper holds 2"),
              std::string::npos);

    // A checkpoint of one wrapper does not resume several.
    auto one = engine::strategy::strategies().build(
        {{"type", "DDPStrategy"}, {"seed", 1}, {"seed_process_generator", false}});
    one->prepare(std::make_shared<TinyGan>(), {{"optimizer", {{"type", "SGD"}, {"lr", 0.1}}}});
    one->save_checkpoint(single_file, {1, 0});
    auto strategy = engine::strategy::strategies().build(ddp_separate());
    strategy->prepare(std::make_shared<TinyGan>(), two_wrappers());
    EXPECT_NE(error_of([&] {
                strategy->resume(single_file);
              }).find("has nothing for the optimizer wrapper \"discriminator\""),
              std::string::npos);
  });
}

}  // namespace
