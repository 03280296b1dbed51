#include "engine/model/init/init_functions.h"

#include <c10/core/GradMode.h>
#include <torch/nn/init.h>

#include <optional>
#include <string>

namespace engine::model::init {
namespace {

std::optional<at::Tensor> own(torch::nn::Module& module, const std::string& name) {
  const auto parameters = module.named_parameters(/*recurse=*/false);
  const auto* found = parameters.find(name);
  if (!found || !found->defined()) return std::nullopt;
  return *found;
}

// Fills "weight" with `weight` and "bias" with the config's "bias" value.
ParamInitFn weight_and_bias(registry::ConfigReader& config,
                            std::function<void(at::Tensor&)> weight) {
  const double bias = config.get("bias", 0.0);
  return [weight = std::move(weight), bias](torch::nn::Module& module) {
    c10::NoGradGuard no_grad;
    if (auto found = own(module, "weight")) weight(*found);
    if (auto found = own(module, "bias")) found->fill_(bias);
  };
}

bool uniform_distribution(registry::ConfigReader& config) {
  const auto distribution = config.get<std::string>("distribution", "normal");
  if (distribution != "normal" && distribution != "uniform") {
    config.fail("key \"distribution\" must be \"normal\" or \"uniform\", not \"" + distribution +
                "\"");
  }
  return distribution == "uniform";
}

torch::nn::init::FanModeType fan_mode(registry::ConfigReader& config) {
  const auto mode = config.get<std::string>("mode", "fan_out");
  if (mode == "fan_out") return torch::kFanOut;
  if (mode == "fan_in") return torch::kFanIn;
  config.fail("key \"mode\" must be \"fan_in\" or \"fan_out\", not \"" + mode + "\"");
}

torch::nn::init::NonlinearityType nonlinearity(registry::ConfigReader& config) {
  const auto name = config.get<std::string>("nonlinearity", "relu");
  if (name == "relu") return torch::kReLU;
  if (name == "leaky_relu") return torch::kLeakyReLU;
  if (name == "linear") return torch::kLinear;
  if (name == "tanh") return torch::kTanh;
  if (name == "sigmoid") return torch::kSigmoid;
  config.fail(
      "key \"nonlinearity\" must be one of relu, leaky_relu, linear, tanh, sigmoid, not \"" + name +
      "\"");
}

void add_builtin_functions(InitFunctionRegistry& registry) {
  registry.add("constant_init", [](registry::ConfigReader& config) {
    const double val = config.require<double>("val");
    return weight_and_bias(config, [val](at::Tensor& w) { w.fill_(val); });
  });
  registry.add("normal_init", [](registry::ConfigReader& config) {
    const double mean = config.get("mean", 0.0), std = config.get("std", 1.0);
    return weight_and_bias(config, [=](at::Tensor& w) { torch::nn::init::normal_(w, mean, std); });
  });
  registry.add("uniform_init", [](registry::ConfigReader& config) {
    const double a = config.get("a", 0.0), b = config.get("b", 1.0);
    return weight_and_bias(config, [=](at::Tensor& w) { torch::nn::init::uniform_(w, a, b); });
  });
  registry.add("xavier_init", [](registry::ConfigReader& config) {
    const double gain = config.get("gain", 1.0);
    const bool uniform = uniform_distribution(config);
    return weight_and_bias(config, [=](at::Tensor& w) {
      uniform ? torch::nn::init::xavier_uniform_(w, gain)
              : torch::nn::init::xavier_normal_(w, gain);
    });
  });
  registry.add("kaiming_init", [](registry::ConfigReader& config) {
    const double a = config.get("a", 0.0);
    const auto mode = fan_mode(config);
    const auto kind = nonlinearity(config);
    const bool uniform = uniform_distribution(config);
    return weight_and_bias(config, [=](at::Tensor& w) {
      uniform ? torch::nn::init::kaiming_uniform_(w, a, mode, kind)
              : torch::nn::init::kaiming_normal_(w, a, mode, kind);
    });
  });
}

}  // namespace

InitFunctionRegistry& param_init_functions() {
  static InitFunctionRegistry registry("FUNCTIONS", add_builtin_functions);
  return registry;
}

}  // namespace engine::model::init
