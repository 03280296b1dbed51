#include "engine/optim/builders.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <stdexcept>
#include <tuple>

#include "engine/dist/errors.h"
#include "engine/optim/amp_optim_wrapper.h"
#include "engine/optim/fused_adam.h"
#include "engine/optim/zero_redundancy_optimizer.h"

namespace engine::optim {
namespace {

using registry::ConfigReader;

std::tuple<double, double> betas(ConfigReader& config) {
  const auto values = config.get<std::vector<double>>("betas", {0.9, 0.999});
  if (values.size() != 2) config.fail("key \"betas\" must hold two numbers");
  return {values[0], values[1]};
}

// `fused`: PyTorch's fused=True, ATen's fused kernel (fused_adam.h).
template <typename Optimizer, typename Fused, typename Options>
std::shared_ptr<torch::optim::Optimizer> build_adam(ConfigReader& config,
                                                    std::vector<at::Tensor> parameters) {
  Options options(config.get("lr", 1e-3));
  options.betas(betas(config))
      .eps(config.get("eps", 1e-8))
      .weight_decay(config.get("weight_decay",
                               std::is_same_v<Options, torch::optim::AdamWOptions> ? 1e-2 : 0.0))
      .amsgrad(config.get("amsgrad", false));
  if (!config.get("fused", false))
    return std::make_shared<Optimizer>(std::move(parameters), options);
  try {
    return std::make_shared<Fused>(std::move(parameters), options);
  } catch (const std::invalid_argument& error) {
    config.fail(error.what());
  }
}

// mmengine's {"type": "ZeroRedundancyOptimizer", "optimizer_type": "SGD",
// ...the wrapped optimizer's keys}; PyTorch's parameters_as_bucket_view is
// accepted (either value: the parameters travel one by one), and its
// overlap_with_ddp refused.
std::shared_ptr<torch::optim::Optimizer> build_zero_redundancy(ConfigReader& config,
                                                               std::vector<at::Tensor> parameters) {
  const auto type = config.require<std::string>("optimizer_type");
  if (type == "ZeroRedundancyOptimizer") config.fail("cannot wrap itself");
  config.get("parameters_as_bucket_view", false);
  if (config.get("overlap_with_ddp", false)) {
    config.fail("key \"overlap_with_ddp\" is not supported: the step runs after backward");
  }
  registry::Json local = config.rest();
  local["type"] = type;
  config.finish();
  auto make_local = [&](std::vector<at::Tensor> share) {
    return optimizers().build(local, std::move(share));
  };
  try {
    return std::make_shared<ZeroRedundancyOptimizer>(std::move(parameters), make_local);
  } catch (const registry::ConfigError&) {
    throw;
  } catch (const dist::InvalidArgument& error) {
    config.fail(error.what());
  }
}

// LibTorch's optimizers check their options as they are built (a negative
// learning rate, a beta outside [0, 1): PyTorch's ValueError); here that is
// a ConfigError in LibTorch's words.
OptimizerRegistry::Builder checked_by_libtorch(OptimizerRegistry::Builder build) {
  return [build = std::move(build)](ConfigReader& config, std::vector<at::Tensor> parameters) {
    try {
      return build(config, std::move(parameters));
    } catch (const c10::Error& error) {
      config.fail(std::string("has options LibTorch refuses: ") + error.what_without_backtrace());
    }
  };
}

std::shared_ptr<torch::optim::Optimizer> build_sgd(ConfigReader& config,
                                                   std::vector<at::Tensor> parameters) {
  torch::optim::SGDOptions options(config.require<double>("lr"));
  options.momentum(config.get("momentum", 0.0))
      .dampening(config.get("dampening", 0.0))
      .weight_decay(config.get("weight_decay", 0.0))
      .nesterov(config.get("nesterov", false));
  return std::make_shared<torch::optim::SGD>(std::move(parameters), options);
}

void add_builtin_optimizers(OptimizerRegistry& registry) {
  registry.add("SGD", checked_by_libtorch(build_sgd));
  registry.add("Adam", checked_by_libtorch(
                           build_adam<torch::optim::Adam, FusedAdam, torch::optim::AdamOptions>));
  registry.add(
      "AdamW",
      checked_by_libtorch(build_adam<torch::optim::AdamW, FusedAdamW, torch::optim::AdamWOptions>));
  registry.add("ZeroRedundancyOptimizer", build_zero_redundancy);
}

void add_builtin_schedulers(SchedulerRegistry& registry) {
  registry.add("MultiStepLR", [](ConfigReader& config, torch::optim::Optimizer& optimizer) {
    return std::make_shared<MultiStepLR>(
        optimizer, config.require<std::vector<int64_t>>("milestones"), config.get("gamma", 0.1));
  });
}

std::optional<ClipGrad> clip_grad(ConfigReader& config) {
  const auto section = config.object("clip_grad");
  if (!section) return std::nullopt;
  ConfigReader clip(*section, config.section() + ".clip_grad");
  ClipGrad out;
  const auto kind = clip.get<std::string>("type", "norm");
  if (kind == "norm") {
    out.kind = ClipGrad::Kind::kNorm;
    out.max_norm = clip.require<double>("max_norm");
    out.norm_type = clip.get("norm_type", 2.0);
  } else if (kind == "value") {
    out.kind = ClipGrad::Kind::kValue;
    out.clip_value = clip.require<double>("clip_value");
  } else {
    clip.fail("has the unknown type \"" + kind + "\"; known types: norm, value");
  }
  clip.finish();
  return out;
}

// mmengine's loss_scale: "dynamic", a number (a static scale), or
// GradScaler's keyword arguments. Absent: dynamic for float16, none for
// bfloat16.
std::optional<LossScalerOptions> loss_scale(ConfigReader& config, c10::ScalarType dtype) {
  const auto value = config.value("loss_scale");
  if (!value) {
    if (dtype == c10::kBFloat16) return std::nullopt;
    return LossScalerOptions{};
  }
  LossScalerOptions out;
  if (value->is_string()) {
    if (value->get<std::string>() != "dynamic")
      config.fail("key \"loss_scale\" must be \"dynamic\", a number or an object, not \"" +
                  value->get<std::string>() + "\"");
    return out;
  }
  if (value->is_number()) {
    out.init_scale = value->get<double>();
    out.dynamic = false;
    return out;
  }
  if (!value->is_object())
    config.fail("key \"loss_scale\" must be \"dynamic\", a number or an object, not " +
                std::string(value->type_name()));
  ConfigReader scaler(*value, config.section() + ".loss_scale");
  out.init_scale = scaler.get("init_scale", out.init_scale);
  out.growth_factor = scaler.get("growth_factor", out.growth_factor);
  out.backoff_factor = scaler.get("backoff_factor", out.backoff_factor);
  out.growth_interval = scaler.get("growth_interval", out.growth_interval);
  const bool enabled = scaler.get("enabled", true);
  scaler.finish();
  if (!enabled) return std::nullopt;
  return out;
}

c10::ScalarType amp_dtype(ConfigReader& config, const std::vector<at::Tensor>& parameters) {
  const bool on_cuda = !parameters.empty() && parameters.front().is_cuda();
  const auto name = config.get<std::string>("dtype", on_cuda ? "float16" : "bfloat16");
  if (name == "float16" || name == "half") return c10::kHalf;
  if (name == "bfloat16") return c10::kBFloat16;
  config.fail("key \"dtype\" must be \"float16\" or \"bfloat16\", not \"" + name + "\"");
}

}  // namespace

OptimizerRegistry& optimizers() {
  static OptimizerRegistry registry("OPTIMIZERS", add_builtin_optimizers);
  return registry;
}

SchedulerRegistry& param_schedulers() {
  static SchedulerRegistry registry("PARAM_SCHEDULERS", add_builtin_schedulers);
  return registry;
}

std::shared_ptr<OptimWrapper> build_optim_wrapper(const registry::Json& config,
                                                  std::vector<at::Tensor> parameters) {
  ConfigReader reader(config, "optim_wrapper");
  const auto type = reader.get<std::string>("type", "OptimWrapper");
  if (type != "OptimWrapper" && type != "AmpOptimWrapper")
    reader.fail("has the unknown type \"" + type +
                "\"; known types: AmpOptimWrapper, OptimWrapper");
  const auto optimizer_config = reader.require<registry::Json>("optimizer");
  OptimWrapperOptions options;
  options.accumulative_counts = reader.get<int64_t>("accumulative_counts", 1);
  if (options.accumulative_counts < 1)
    reader.fail("key \"accumulative_counts\" must be at least 1");
  options.clip_grad = clip_grad(reader);
  if (type == "OptimWrapper") {
    reader.finish();
    return std::make_shared<OptimWrapper>(
        optimizers().build(optimizer_config, std::move(parameters)), options);
  }
  AmpOptions amp;
  amp.dtype = amp_dtype(reader, parameters);
  amp.loss_scaler = loss_scale(reader, amp.dtype);
  // mmengine's flag for FSDP's sharded GradScaler: every scaler here agrees
  // over the shards.
  reader.get("use_fsdp", false);
  reader.finish();
  auto optimizer = optimizers().build(optimizer_config, std::move(parameters));
  try {
    return std::make_shared<AmpOptimWrapper>(std::move(optimizer), options, amp);
  } catch (const dist::InvalidArgument& error) {
    reader.fail(error.what());
  }
}

}  // namespace engine::optim
