#pragma once

#include "engine/model/comm_hooks/comm_hook.h"
#include "engine/registry/registry.h"

namespace engine::model {

// DDP's "comm_hook" config: {"type": "allreduce"}, {"type": "fp16_compress"},
// {"type": "bf16_compress"}, or {"type": "PowerSGD", ...} with
// PowerSGDOptions' keys (matrix_approximation_rank, start_powerSGD_iter,
// min_compression_rate, use_error_feedback, warm_start,
// orthogonalization_epsilon, random_seed).
using CommHookRegistry = registry::Registry<CommHookPtr>;
CommHookRegistry& comm_hooks();

}  // namespace engine::model
