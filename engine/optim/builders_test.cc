#include "engine/optim/builders.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

namespace engine::optim {
namespace {

std::vector<at::Tensor> parameters() { return {at::zeros({2}, at::kDouble).requires_grad_()}; }

std::string error_of(const registry::Json& config) {
  try {
    build_optim_wrapper(config, parameters());
  } catch (const registry::ConfigError& error) {
    return error.what();
  }
  return "no error";
}

TEST(BuildersTest, BuildsAnSgdWrapperWithAccumulationAndClipping) {
  auto wrapper = build_optim_wrapper(registry::Json::parse(R"({
      "optimizer": {"type": "SGD", "lr": 0.5, "momentum": 0.9},
      "accumulative_counts": 2, "clip_grad": {"max_norm": 1.0}})"),
                                     parameters());
  auto& sgd = dynamic_cast<torch::optim::SGD&>(wrapper->optimizer());
  EXPECT_EQ(sgd.param_groups()[0].options().get_lr(), 0.5);
  auto& options = static_cast<torch::optim::SGDOptions&>(sgd.param_groups()[0].options());
  EXPECT_EQ(options.momentum(), 0.9);
  EXPECT_FALSE(wrapper->should_sync());  // first of two accumulated steps
}

TEST(BuildersTest, ConfigMistakesAreNamed) {
  EXPECT_NE(error_of(registry::Json::parse(R"({"optimizer": {"type": "Lion", "lr": 1}})"))
                .find("unknown type \"Lion\"; known types: Adam, AdamW, SGD"),
            std::string::npos);
  EXPECT_NE(error_of(registry::Json::parse(R"({"optimizer": {"type": "SGD", "lr": 1, "mom": 1}})"))
                .find("OPTIMIZERS (SGD) has unknown key(s) mom"),
            std::string::npos);
  EXPECT_NE(error_of(registry::Json::parse(R"({})")).find("lacks the required key \"optimizer\""),
            std::string::npos);
  EXPECT_NE(error_of(registry::Json::parse(
                         R"({"optimizer": {"type": "SGD", "lr": 1}, "clip_grad": {"type": "l1"}})"))
                .find("optim_wrapper.clip_grad has the unknown type \"l1\""),
            std::string::npos);
  EXPECT_NE(error_of(registry::Json::parse(R"({"optimizer": {"type": "Adam", "betas": [0.9]}})"))
                .find("\"betas\" must hold two numbers"),
            std::string::npos);
}

TEST(MultiStepLRTest, DecaysAtEachMilestoneAndResumesFromItsState) {
  torch::optim::SGD sgd(parameters(), torch::optim::SGDOptions(1.0));
  auto scheduler = param_schedulers().build(
      registry::Json::parse(R"({"type": "MultiStepLR", "milestones": [3, 1], "gamma": 0.5})"), sgd);
  std::vector<double> lrs;
  for (int i = 0; i < 4; ++i) {
    lrs.push_back(scheduler->lr());
    scheduler->step();
  }
  EXPECT_EQ(lrs, (std::vector<double>{1.0, 0.5, 0.5, 0.25}));
  torch::optim::SGD fresh(parameters(), torch::optim::SGDOptions(1.0));
  MultiStepLR resumed(fresh, {1, 3}, 0.5);
  resumed.load_state(scheduler->state());
  EXPECT_EQ(resumed.lr(), 0.25);
  EXPECT_EQ(resumed.last_step(), 4);
}

}  // namespace
}  // namespace engine::optim
