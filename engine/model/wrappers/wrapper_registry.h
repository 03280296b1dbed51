#pragma once

#include <memory>

#include "engine/model/wrappers/model_wrapper.h"
#include "engine/registry/registry.h"

namespace engine::model {

using ModelWrapperRegistry =
    registry::Registry<std::shared_ptr<ModelWrapper>, std::shared_ptr<BaseModel>>;

// mmengine's MODEL_WRAPPERS: MMDistributedDataParallel and
// MMSeparateDistributedDataParallel, with the DDPOptions keys
// (detect_anomalous_params, broadcast_buffers, find_unused_parameters,
// static_graph, bucket_cap_mb, gradient_as_bucket_view, comm_hook);
// MMFullyShardedDataParallel
// (sharding_strategy, auto_wrap_policy, sync_module_states,
// hybrid_shard_size, use_orig_params, mixed_precision, backward_prefetch,
// forward_prefetch, limit_all_gathers, param_init_fn, device_id,
// cpu_offload); MMZeroDataParallel (stage,
// reduce_bucket_size, overlap_comm, sync_module_states). Building one is
// collective.
// Users add their own wrappers with model_wrappers().add(...).
ModelWrapperRegistry& model_wrappers();

}  // namespace engine::model
