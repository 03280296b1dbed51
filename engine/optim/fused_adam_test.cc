#include "engine/optim/fused_adam.h"

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sin.h>
#include <gtest/gtest.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/optim/builders.h"
#include "engine/registry/registry.h"

namespace engine::optim {
namespace {

// Three parameters of odd sizes; the last never gets a gradient.
std::vector<at::Tensor> fresh_params() {
  at::manual_seed(7);
  return {at::randn({5, 3}).requires_grad_(), at::randn({7}).requires_grad_(),
          at::randn({2}).requires_grad_()};
}

// `steps` steps on the same gradients for every optimizer given: each
// step's gradient is a fixed function of the step and the parameter.
void train(torch::optim::Optimizer& optimizer, std::vector<at::Tensor>& params, int steps) {
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i + 1 < params.size(); ++i) {
      params[i].mutable_grad() =
          at::sin(at::arange(params[i].numel(), at::kFloat) * (step + 1) + static_cast<double>(i))
              .reshape(params[i].sizes());
    }
    optimizer.step();
  }
}

class FusedAdamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fused_adam_available(c10::DeviceType::CPU, /*decoupled=*/false) ||
        !fused_adam_available(c10::DeviceType::CPU, /*decoupled=*/true)) {
      GTEST_SKIP() << "this LibTorch has no fused Adam kernel for the CPU (before 2.4)";
    }
  }
};

void expect_near(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_TRUE(at::allclose(actual[i], expected[i], /*rtol=*/1e-6, /*atol=*/1e-7))
        << "parameter " << i << ": " << actual[i] << " against " << expected[i];
  }
}

TEST_F(FusedAdamTest, StepsAsLibTorchsAdamWithEveryOption) {
  for (const bool amsgrad : {false, true}) {
    const auto options = torch::optim::AdamOptions(0.05).weight_decay(0.1).amsgrad(amsgrad);
    auto fused_params = fresh_params();
    auto plain_params = fresh_params();
    FusedAdam fused(fused_params, options);
    torch::optim::Adam plain(plain_params, options);
    train(fused, fused_params, 4);
    train(plain, plain_params, 4);
    expect_near(fused_params, plain_params);
    // The parameter without a gradient is untouched and has no state.
    EXPECT_TRUE(at::equal(fused_params[2], fresh_params()[2]));
    EXPECT_EQ(fused.state().size(), 2u);
  }
}

TEST_F(FusedAdamTest, AdamWDecaysTheWeightsAsLibTorchsAdamW) {
  const auto options = torch::optim::AdamWOptions(0.05).weight_decay(0.3);
  auto fused_params = fresh_params();
  auto plain_params = fresh_params();
  FusedAdamW fused(fused_params, options);
  torch::optim::AdamW plain(plain_params, options);
  train(fused, fused_params, 4);
  train(plain, plain_params, 4);
  expect_near(fused_params, plain_params);
}

TEST_F(FusedAdamTest, ItsStateResumesInLibTorchsAdamAndBack) {
  const auto options = torch::optim::AdamOptions(0.05);
  auto fused_params = fresh_params();
  FusedAdam fused(fused_params, options);
  train(fused, fused_params, 3);
  torch::serialize::OutputArchive saved;
  fused.save(saved);
  std::ostringstream bytes;
  saved.save_to(bytes);

  // Three more steps fused, against three more in LibTorch's Adam resumed
  // from the fused one's state.
  auto resumed_params = fused_params;
  for (auto& param : resumed_params) param = param.detach().clone().requires_grad_();
  torch::optim::Adam resumed(resumed_params, options);
  std::istringstream in(bytes.str());
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  resumed.load(archive);
  train(fused, fused_params, 3);
  train(resumed, resumed_params, 3);
  expect_near(resumed_params, fused_params);
  ASSERT_EQ(resumed.state().size(), 2u);
  for (const auto& entry : resumed.state()) {
    EXPECT_EQ(static_cast<const torch::optim::AdamParamState&>(*entry.second).step(), 6);
  }
}

TEST(FusedAdamErrorsTest, ADeviceWithoutTheKernelIsRefusedByName) {
  const std::vector<at::Tensor> params = {at::empty({3}, at::TensorOptions().device(at::kMeta))};
  EXPECT_FALSE(fused_adam_available(c10::DeviceType::Meta, /*decoupled=*/false));
  try {
    FusedAdam adam(params, torch::optim::AdamOptions(0.1));
    FAIL() << "a meta tensor was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("no aten::_fused_adam_ kernel for meta tensors"),
              std::string::npos)
        << error.what();
  }
  try {
    build_optim_wrapper(
        registry::Json::parse(R"({"optimizer": {"type": "AdamW", "lr": 1, "fused": true}})"),
        params);
    FAIL() << "a meta tensor was accepted";
  } catch (const registry::ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("OPTIMIZERS (AdamW)"), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("drop \"fused\""), std::string::npos) << error.what();
  }
}

TEST_F(FusedAdamTest, TheBuilderMakesTheFusedFormOnRequest) {
  auto wrapper = build_optim_wrapper(
      registry::Json::parse(R"({"optimizer": {"type": "Adam", "lr": 1, "fused": true}})"),
      fresh_params());
  EXPECT_NE(dynamic_cast<FusedAdam*>(&wrapper->optimizer()), nullptr);
  wrapper = build_optim_wrapper(
      registry::Json::parse(R"({"optimizer": {"type": "Adam", "lr": 1}})"), fresh_params());
  EXPECT_EQ(dynamic_cast<FusedAdam*>(&wrapper->optimizer()), nullptr);
}

}  // namespace
}  // namespace engine::optim
