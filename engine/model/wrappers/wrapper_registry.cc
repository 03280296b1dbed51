#include "engine/model/wrappers/wrapper_registry.h"

#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/model/wrappers/separate_distributed_data_parallel.h"

namespace engine::model {
namespace {

DDPOptions ddp_options(registry::ConfigReader& config) {
  DDPOptions options;
  options.detect_anomalous_params =
      config.get("detect_anomalous_params", options.detect_anomalous_params);
  options.broadcast_buffers = config.get("broadcast_buffers", options.broadcast_buffers);
  options.find_unused_parameters =
      config.get("find_unused_parameters", options.find_unused_parameters);
  options.bucket_cap_mb = config.get("bucket_cap_mb", options.bucket_cap_mb);
  if (options.bucket_cap_mb <= 0) config.fail("key \"bucket_cap_mb\" must be positive");
  options.gradient_as_bucket_view =
      config.get("gradient_as_bucket_view", options.gradient_as_bucket_view);
  return options;
}

template <typename Wrapper>
std::shared_ptr<ModelWrapper> build(registry::ConfigReader& config,
                                    std::shared_ptr<BaseModel> module) {
  return std::make_shared<Wrapper>(std::move(module), ddp_options(config));
}

void add_builtin_wrappers(ModelWrapperRegistry& registry) {
  registry.add("MMDistributedDataParallel", build<MMDistributedDataParallel>);
  registry.add("MMSeparateDistributedDataParallel", build<MMSeparateDistributedDataParallel>);
}

}  // namespace

ModelWrapperRegistry& model_wrappers() {
  static ModelWrapperRegistry registry("MODEL_WRAPPERS", add_builtin_wrappers);
  return registry;
}

}  // namespace engine::model
