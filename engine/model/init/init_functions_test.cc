#include "engine/model/init/init_functions.h"

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/linear.h>

#include <functional>
#include <string>
#include <vector>

namespace {

using engine::model::init::param_init_functions;
using engine::registry::Json;

struct Case {
  Json config;
  std::function<void(at::Tensor&)> weight;  // the same draw, made directly
  double bias;
};

// Each function, its every argument set away from its default, gives the
// weight LibTorch's own init gives from the same generator state, and the
// bias its constant.
TEST(InitFunctions, EachFillsWeightAndBiasAsTorchInitDoes) {
  namespace init = torch::nn::init;
  const std::vector<Case> cases = {
      {{{"type", "constant_init"}, {"val", 0.5}, {"bias", 0.25}},
       [](at::Tensor& w) { w.fill_(0.5); },
       0.25},
      {{{"type", "normal_init"}, {"mean", 1.0}, {"std", 0.5}, {"bias", -1.0}},
       [](at::Tensor& w) { init::normal_(w, 1.0, 0.5); },
       -1.0},
      {{{"type", "uniform_init"}, {"a", -2.0}, {"b", 3.0}},
       [](at::Tensor& w) { init::uniform_(w, -2.0, 3.0); },
       0.0},
      {{{"type", "xavier_init"}, {"gain", 2.0}, {"distribution", "uniform"}, {"bias", 0.5}},
       [](at::Tensor& w) { init::xavier_uniform_(w, 2.0); },
       0.5},
      {{{"type", "xavier_init"}}, [](at::Tensor& w) { init::xavier_normal_(w, 1.0); }, 0.0},
      {{{"type", "kaiming_init"},
        {"a", 0.1},
        {"mode", "fan_in"},
        {"nonlinearity", "leaky_relu"},
        {"distribution", "uniform"}},
       [](at::Tensor& w) { init::kaiming_uniform_(w, 0.1, torch::kFanIn, torch::kLeakyReLU); },
       0.0},
      {{{"type", "kaiming_init"}, {"nonlinearity", "tanh"}},
       [](at::Tensor& w) { init::kaiming_normal_(w, 0.0, torch::kFanOut, torch::kTanh); },
       0.0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.config.dump());
    torch::nn::Linear layer(3, 5);
    const auto fn = param_init_functions().build(c.config);
    at::manual_seed(7);
    fn(*layer);
    at::Tensor want = at::empty({5, 3});
    at::manual_seed(7);
    c10::NoGradGuard no_grad;
    c.weight(want);
    EXPECT_TRUE(at::equal(layer->weight, want));
    EXPECT_TRUE(at::equal(layer->bias, at::full({5}, c.bias)));
  }
}

TEST(InitFunctions, AModuleWithoutWeightOrBiasIsLeftAlone) {
  torch::nn::Module empty;
  param_init_functions().build({{"type", "normal_init"}})(empty);
  torch::nn::Linear no_bias(torch::nn::LinearOptions(2, 2).bias(false));
  param_init_functions().build({{"type", "constant_init"}, {"val", 1.0}})(*no_bias);
  EXPECT_TRUE(at::equal(no_bias->weight, at::ones({2, 2})));
}

TEST(InitFunctions, BadArgumentsAreNamed) {
  auto error_of = [](const Json& config) {
    try {
      param_init_functions().build(config);
    } catch (const engine::registry::ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of({{"type", "constant_init"}}).find("lacks the required key \"val\""),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "xavier_init"}, {"distribution", "gaussian"}})
                .find("key \"distribution\" must be \"normal\" or \"uniform\", not \"gaussian\""),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "kaiming_init"}, {"mode", "fan"}})
                .find("key \"mode\" must be \"fan_in\" or \"fan_out\""),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "kaiming_init"}, {"nonlinearity", "gelu"}})
                .find("key \"nonlinearity\" must be one of relu"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "normal_init"}, {"sd", 1}}).find("has unknown key(s) sd"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "normal_init"}, {"std", -1}})
                .find("FUNCTIONS (normal_init) key \"std\" must be at least 0, not -1"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "uniform_init"}, {"a", 2}, {"b", 1}})
                .find("key \"b\" must be at least 2, not 1"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "xavier_init"}, {"gain", -0.5}})
                .find("key \"gain\" must be at least 0, not -0.5"),
            std::string::npos);
}

// Found with tools/fuzz/config_fuzz: values a float parameter cannot hold
// reached LibTorch's own errors, or filled it with infinities. (What
// LibTorch says after the engine's words differs between its versions.)
TEST(InitFunctions, ValuesTheParameterCannotHoldAreNamedWhenApplied) {
  auto error_applying = [](const Json& config) {
    torch::nn::Linear layer(3, 2);
    try {
      param_init_functions().build(config)(*layer);
    } catch (const engine::registry::ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_applying({{"type", "constant_init"}, {"val", 1e308}})
                .find("FUNCTIONS (constant_init) cannot fill a Float weight: "),
            std::string::npos);
  EXPECT_NE(error_applying({{"type", "constant_init"}, {"val", 1}, {"bias", -1e308}})
                .find("FUNCTIONS (constant_init) cannot fill a Float bias: "),
            std::string::npos);
  // Refused by LibTorch's range check, or else by the finiteness check.
  const std::string uniform =
      error_applying({{"type", "uniform_init"}, {"a", -1e308}, {"b", 1e308}});
  EXPECT_NE(uniform.find("FUNCTIONS (uniform_init) "), std::string::npos) << uniform;
  EXPECT_NE(uniform.find(" a Float weight"), std::string::npos) << uniform;
  EXPECT_NE(
      error_applying({{"type", "normal_init"}, {"mean", 1e308}})
          .find("FUNCTIONS (normal_init) fills a Float weight with values that are not finite"),
      std::string::npos);
  EXPECT_EQ(error_applying({{"type", "normal_init"}, {"mean", 1e30}}), "no error");
}

}  // namespace
