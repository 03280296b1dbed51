#include "engine/model/wrappers/wrapper_registry.h"

#include <limits>
#include <map>
#include <optional>
#include <string>

#include "engine/model/comm_hooks/comm_hook_registry.h"
#include "engine/model/init/init_functions.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/model/wrappers/separate_distributed_data_parallel.h"
#include "engine/model/wrappers/zero_data_parallel.h"

namespace engine::model {
namespace {

DDPOptions ddp_options(registry::ConfigReader& config) {
  DDPOptions options;
  options.detect_anomalous_params =
      config.get("detect_anomalous_params", options.detect_anomalous_params);
  options.broadcast_buffers = config.get("broadcast_buffers", options.broadcast_buffers);
  options.find_unused_parameters =
      config.get("find_unused_parameters", options.find_unused_parameters);
  options.static_graph = config.get("static_graph", options.static_graph);
  options.bucket_cap_mb = config.get("bucket_cap_mb", options.bucket_cap_mb);
  // The bound keeps the bucket's bytes inside int64_t.
  constexpr double kMaxBucketCapMb = 1 << 30;
  if (!(options.bucket_cap_mb > 0 && options.bucket_cap_mb <= kMaxBucketCapMb)) {
    config.fail("key \"bucket_cap_mb\" must be positive and at most 2^30 (a PiB)");
  }
  options.gradient_as_bucket_view =
      config.get("gradient_as_bucket_view", options.gradient_as_bucket_view);
  if (const auto hook = config.object("comm_hook")) options.comm_hook = comm_hooks().build(*hook);
  return options;
}

template <typename Wrapper>
std::shared_ptr<ModelWrapper> build(registry::ConfigReader& config,
                                    std::shared_ptr<BaseModel> module) {
  return std::make_shared<Wrapper>(std::move(module), ddp_options(config));
}

// auto_wrap_policy: {"type": "size_based_auto_wrap_policy", "min_num_params": N}
// or {"type": "ModuleWrapPolicy", "module_classes": ["Linear", ...]}, after
// torch.distributed.fsdp.wrap's names.
sharding::WrapPolicy wrap_policy(registry::ConfigReader& config) {
  sharding::WrapPolicy policy;
  const auto section = config.object("auto_wrap_policy");
  if (!section) return policy;
  registry::ConfigReader reader(*section, config.section() + ".auto_wrap_policy");
  const auto type = reader.require<std::string>("type");
  if (type == "size_based_auto_wrap_policy") {
    policy.min_num_params = reader.require<int64_t>("min_num_params");
    if (policy.min_num_params <= 0) reader.fail("key \"min_num_params\" must be positive");
  } else if (type == "ModuleWrapPolicy") {
    policy.module_types = reader.require<std::vector<std::string>>("module_classes");
  } else {
    reader.fail("has the unknown type \"" + type +
                "\"; known types: size_based_auto_wrap_policy, ModuleWrapPolicy");
  }
  reader.finish();
  return policy;
}

// A floating-point dtype by torch's name (mmengine reads it with
// getattr(torch, name)); absent: nullopt.
std::optional<at::ScalarType> float_dtype(registry::ConfigReader& config, const std::string& key) {
  static const std::map<std::string, at::ScalarType> known = {
      {"float32", at::kFloat},    {"float", at::kFloat},  {"float64", at::kDouble},
      {"double", at::kDouble},    {"float16", at::kHalf}, {"half", at::kHalf},
      {"bfloat16", at::kBFloat16}};
  const auto name = config.get_optional<std::string>(key);
  if (!name) return std::nullopt;
  const auto found = known.find(*name);
  if (found == known.end()) {
    config.fail("key \"" + key + "\" names the unknown dtype \"" + *name +
                "\"; known: float32 (float), float64 (double), float16 (half), bfloat16");
  }
  return found->second;
}

// mixed_precision: {"param_dtype": "bfloat16", "reduce_dtype": "float32",
// "buffer_dtype": "float32"}, each optional, as mmengine writes it.
MixedPrecision mixed_precision(registry::ConfigReader& config) {
  MixedPrecision precision;
  const auto section = config.object("mixed_precision");
  if (!section) return precision;
  registry::ConfigReader reader(*section, config.section() + ".mixed_precision");
  precision.param_dtype = float_dtype(reader, "param_dtype");
  precision.reduce_dtype = float_dtype(reader, "reduce_dtype");
  precision.buffer_dtype = float_dtype(reader, "buffer_dtype");
  reader.finish();
  return precision;
}

// backward_prefetch: "BACKWARD_PRE" (PyTorch's default), "BACKWARD_POST",
// or null (mmengine's None) for none.
BackwardPrefetch backward_prefetch(registry::ConfigReader& config) {
  if (config.is_null("backward_prefetch")) return BackwardPrefetch::kNone;
  const auto name = config.get_optional<std::string>("backward_prefetch");
  if (!name) return BackwardPrefetch::kBackwardPre;
  try {
    return parse_backward_prefetch(*name);
  } catch (const dist::InvalidArgument& error) {
    config.fail(std::string("key \"backward_prefetch\": ") + error.what());
  }
}

// param_init_fn: a FUNCTIONS name ("normal_init") or a config with its
// arguments ({"type": "normal_init", "std": 0.02}); null or absent: none.
init::ParamInitFn param_init_fn(registry::ConfigReader& config) {
  const auto value = config.value("param_init_fn");
  if (!value || value->is_null()) return nullptr;
  if (value->is_string()) return init::param_init_functions().build({{"type", *value}});
  if (value->is_object()) return init::param_init_functions().build(*value);
  config.fail("key \"param_init_fn\" must be a FUNCTIONS name or a config object, not " +
              std::string(value->type_name()));
}

// device_id: an integer is a CUDA device index (PyTorch's), a string a
// device ("cpu", "cuda:1"); null or absent: none.
std::optional<c10::Device> device_id(registry::ConfigReader& config) {
  const auto value = config.value("device_id");
  if (!value || value->is_null()) return std::nullopt;
  if (value->is_number_integer()) {
    const auto index =
        config.get_whole("device_id", 0, 0, std::numeric_limits<c10::DeviceIndex>::max());
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  if (value->is_string()) {
    try {
      return c10::Device(value->get<std::string>());
    } catch (const c10::Error&) {
      config.fail("key \"device_id\" names no device: \"" + value->get<std::string>() + "\"");
    }
  }
  config.fail("key \"device_id\" must be an integer (a CUDA index) or a device string, not " +
              std::string(value->type_name()));
}

// cpu_offload: a boolean, or mmengine's CPUOffload as {"offload_params": b}.
bool cpu_offload(registry::ConfigReader& config) {
  const auto value = config.value("cpu_offload");
  if (!value || value->is_null()) return false;
  if (!value->is_object()) return config.get("cpu_offload", false);
  registry::ConfigReader reader(*value, config.section() + ".cpu_offload");
  const bool offload = reader.get("offload_params", false);
  reader.finish();
  return offload;
}

std::shared_ptr<ModelWrapper> build_fsdp(registry::ConfigReader& config,
                                         std::shared_ptr<BaseModel> module) {
  FSDPOptions options;
  options.sharding_strategy =
      parse_sharding_strategy(config.get<std::string>("sharding_strategy", "FULL_SHARD"));
  options.auto_wrap_policy = wrap_policy(config);
  options.sync_module_states = config.get("sync_module_states", options.sync_module_states);
  options.hybrid_shard_size = static_cast<int>(config.get_whole(
      "hybrid_shard_size", options.hybrid_shard_size, 0, std::numeric_limits<int>::max()));
  options.mixed_precision = mixed_precision(config);
  options.backward_prefetch = backward_prefetch(config);
  options.forward_prefetch = config.get("forward_prefetch", options.forward_prefetch);
  options.limit_all_gathers = config.get("limit_all_gathers", options.limit_all_gathers);
  options.param_init_fn = param_init_fn(config);
  options.skip_init_weights = config.get("skip_init_weights", options.skip_init_weights);
  options.device_id = device_id(config);
  options.cpu_offload = cpu_offload(config);
  // Accepted for mmengine configs; the wrapper always keeps the original
  // parameters (one shard tensor per parameter).
  config.get("use_orig_params", true);
  return std::make_shared<MMFullyShardedDataParallel>(std::move(module), options);
}

// DeepSpeed's zero_optimization names.
std::shared_ptr<ModelWrapper> build_zero(registry::ConfigReader& config,
                                         std::shared_ptr<BaseModel> module) {
  ZeroOptions options;
  options.stage = config.get("stage", options.stage);
  // DeepSpeed configs write it as 5e8: a number, not necessarily an integer.
  options.reduce_bucket_size =
      config.get_whole("reduce_bucket_size", options.reduce_bucket_size, 1, kMaxReduceBucketSize);
  options.overlap_comm = config.get("overlap_comm", options.overlap_comm);
  options.sync_module_states = config.get("sync_module_states", options.sync_module_states);
  return std::make_shared<MMZeroDataParallel>(std::move(module), options);
}

void add_builtin_wrappers(ModelWrapperRegistry& registry) {
  registry.add("MMDistributedDataParallel", build<MMDistributedDataParallel>);
  registry.add("MMFullyShardedDataParallel", build_fsdp);
  registry.add("MMSeparateDistributedDataParallel", build<MMSeparateDistributedDataParallel>);
  registry.add("MMZeroDataParallel", build_zero);
}

}  // namespace

ModelWrapperRegistry& model_wrappers() {
  static ModelWrapperRegistry registry("MODEL_WRAPPERS", add_builtin_wrappers);
  return registry;
}

}  // namespace engine::model
