#include "engine/model/comm_hooks/comm_hook_registry.h"

#include "engine/model/comm_hooks/powersgd.h"

namespace engine::model {
namespace {

CommHookPtr build_powersgd(registry::ConfigReader& config) {
  PowerSGDOptions options;
  options.matrix_approximation_rank =
      config.get("matrix_approximation_rank", options.matrix_approximation_rank);
  options.start_powerSGD_iter = config.get("start_powerSGD_iter", options.start_powerSGD_iter);
  options.min_compression_rate = config.get("min_compression_rate", options.min_compression_rate);
  options.use_error_feedback = config.get("use_error_feedback", options.use_error_feedback);
  options.warm_start = config.get("warm_start", options.warm_start);
  options.orthogonalization_epsilon =
      config.get("orthogonalization_epsilon", options.orthogonalization_epsilon);
  options.random_seed = config.get("random_seed", options.random_seed);
  try {
    return powersgd_hook(options);
  } catch (const dist::InvalidArgument& error) {
    config.fail(error.what());
  }
}

void add_builtins(CommHookRegistry& registry) {
  registry.add("allreduce", [](registry::ConfigReader&) { return allreduce_hook(); });
  registry.add("fp16_compress", [](registry::ConfigReader&) { return fp16_compress_hook(); });
  registry.add("bf16_compress", [](registry::ConfigReader&) { return bf16_compress_hook(); });
  registry.add("PowerSGD", build_powersgd);
}

}  // namespace

CommHookRegistry& comm_hooks() {
  static CommHookRegistry registry("comm_hook", add_builtins);
  return registry;
}

}  // namespace engine::model
