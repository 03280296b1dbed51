#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "engine/optim/optim_wrapper.h"
#include "engine/optim/param_scheduler.h"
#include "engine/registry/registry.h"

// Optimizers, optimizer wrappers and schedulers from mmengine-style configs.
namespace engine::optim {

using OptimizerRegistry =
    registry::Registry<std::shared_ptr<torch::optim::Optimizer>, std::vector<at::Tensor>>;
// LibTorch's SGD (lr, momentum, dampening, weight_decay, nesterov), Adam and
// AdamW (lr, betas, eps, weight_decay, amsgrad, and fused: PyTorch's
// fused=True, fused_adam.h; a ConfigError where this LibTorch lacks the
// kernel for the parameters' device), and ZeroRedundancyOptimizer
// (optimizer_type and that optimizer's keys: zero_redundancy_optimizer.h).
OptimizerRegistry& optimizers();

// {"type": "OptimWrapper", "optimizer": {...}, "accumulative_counts": 1,
//  "clip_grad": {"type": "norm", "max_norm": 1, "norm_type": 2} or
//               {"type": "value", "clip_value": 1}}
// or {"type": "AmpOptimWrapper", the same keys, "dtype": "float16" or
//  "bfloat16" (default: float16 for CUDA parameters, bfloat16 for CPU ones),
//  "loss_scale": "dynamic", a number (static), or {"init_scale",
//  "growth_factor", "backoff_factor", "growth_interval", "enabled"}
//  (default: dynamic for float16, none for bfloat16), "use_fsdp" (accepted;
//  every scaler agrees over shards)}: amp_optim_wrapper.h.
std::shared_ptr<OptimWrapper> build_optim_wrapper(const registry::Json& config,
                                                  std::vector<at::Tensor> parameters);

using SchedulerRegistry =
    registry::Registry<std::shared_ptr<MultiStepLR>, torch::optim::Optimizer&>;
// MultiStepLR (milestones, gamma) stepped per iteration.
SchedulerRegistry& param_schedulers();

}  // namespace engine::optim
