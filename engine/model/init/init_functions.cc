#include "engine/model/init/init_functions.h"

#include <c10/core/GradMode.h>
#include <c10/util/StringUtil.h>
#include <torch/nn/init.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace engine::model::init {
namespace {

std::optional<at::Tensor> own(torch::nn::Module& module, const std::string& name) {
  const auto parameters = module.named_parameters(/*recurse=*/false);
  const auto* found = parameters.find(name);
  if (!found || !found->defined()) return std::nullopt;
  return *found;
}

// Runs `fill` on the module's `name`; a ConfigError of `section` when
// LibTorch refuses the values for the tensor's dtype or they come out not
// finite (1e300 in a float weight), so that no model trains from garbage.
void fill_checked(const std::string& section, const std::string& name, at::Tensor& tensor,
                  const std::function<void(at::Tensor&)>& fill) {
  const std::string what = std::string(c10::toString(tensor.scalar_type())) + " " + name;
  const auto refused = [&](const std::string& why) {
    registry::fail_config(section, "cannot fill a " + what + ": " + why);
  };
  try {
    fill(tensor);
  } catch (const c10::Error& error) {
    refused(error.what_without_backtrace());
  } catch (const std::runtime_error& error) {  // c10's overflow check of a Scalar
    refused(error.what());
  }
  if (tensor.is_floating_point() && !tensor.isfinite().all().item<bool>()) {
    registry::fail_config(section, "fills a " + what + " with values that are not finite");
  }
}

// Fills "weight" with `weight` and "bias" with the config's "bias" value.
ParamInitFn weight_and_bias(registry::ConfigReader& config,
                            std::function<void(at::Tensor&)> weight) {
  const double bias = config.get("bias", 0.0);
  return [weight = std::move(weight), bias, section = config.section()](torch::nn::Module& module) {
    c10::NoGradGuard no_grad;
    if (auto found = own(module, "weight")) fill_checked(section, "weight", *found, weight);
    if (auto found = own(module, "bias")) {
      fill_checked(section, "bias", *found, [bias](at::Tensor& b) { b.fill_(bias); });
    }
  };
}

// `value` of `key`, refused unless at least `least`.
double at_least(registry::ConfigReader& config, const std::string& key, double fallback,
                double least) {
  const double value = config.get(key, fallback);
  if (!(value >= least)) {
    config.fail("key \"" + key + "\" must be at least " + c10::str(least) + ", not " +
                c10::str(value));
  }
  return value;
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
    const double mean = config.get("mean", 0.0), std = at_least(config, "std", 1.0, 0);
    return weight_and_bias(config, [=](at::Tensor& w) { torch::nn::init::normal_(w, mean, std); });
  });
  registry.add("uniform_init", [](registry::ConfigReader& config) {
    const double a = config.get("a", 0.0), b = at_least(config, "b", 1.0, a);
    return weight_and_bias(config, [=](at::Tensor& w) { torch::nn::init::uniform_(w, a, b); });
  });
  registry.add("xavier_init", [](registry::ConfigReader& config) {
    const double gain = at_least(config, "gain", 1.0, 0);
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
