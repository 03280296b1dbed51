#pragma once

#include <c10/core/DeviceType.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <vector>

// PyTorch's Adam(fused=True) and AdamW(fused=True) for LibTorch: each step
// is one call of ATen's fused kernel (aten::_fused_adam_, _fused_adamw_) per
// param group, over the parameters that have gradients, where LibTorch's own
// step runs eight operations per parameter. The state is LibTorch's
// AdamParamState (step, exp_avg, exp_avg_sq, max_exp_avg_sq), so saving,
// loading, optimizer_state and the sharded checkpoints see an Adam or AdamW,
// and a checkpoint moves freely between the fused and the unfused forms.
// Results match PyTorch's fused optimizer on the same values bit for bit
// (testing/cross_check), and LibTorch's unfused one to rounding.
namespace engine::optim {

// Whether this LibTorch has the fused kernel for `device` (AdamW's when
// `decoupled`): PyTorch has them on CUDA from 2.0 (AdamW's from 2.1) and
// on the CPU from 2.4; Debian's 1.13 has Adam's on CUDA only.
bool fused_adam_available(c10::DeviceType device, bool decoupled);

class FusedAdam : public torch::optim::Adam {
 public:
  // Throws std::invalid_argument naming the device when the kernel is not
  // available for the parameters' device (fused_adam_available).
  FusedAdam(std::vector<at::Tensor> params, torch::optim::AdamOptions options);
  at::Tensor step(LossClosure closure = nullptr) override;
};

class FusedAdamW : public torch::optim::AdamW {
 public:
  FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions options);
  at::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace engine::optim
