#include "engine/optim/fused_adam.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Optional.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/version.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/compat/optim.h"

namespace engine::optim {
namespace {

using torch::optim::AdamParamState;
using torch::optim::Optimizer;

// The kernel is looked up by name, not called through its ATen function,
// because AdamW's is not declared at all in LibTorch 1.13.
using FusedKernel = void(at::TensorList, at::TensorList, at::TensorList, at::TensorList,
                         at::TensorList, at::TensorList, double, double, double, double, double,
                         bool, bool, const c10::optional<at::Tensor>&,
                         const c10::optional<at::Tensor>&);

const char* kernel_name(bool decoupled) {
  return decoupled ? "aten::_fused_adamw_" : "aten::_fused_adam_";
}

std::optional<c10::OperatorHandle> find_kernel(bool decoupled) {
  auto handle = c10::Dispatcher::singleton().findSchema({kernel_name(decoupled), ""});
  if (!handle) return std::nullopt;
  return *handle;
}

// Looked up once, not at every step: LibTorch registers its operators when
// it loads.
const std::optional<c10::OperatorHandle>& kernel(bool decoupled) {
  static const std::optional<c10::OperatorHandle> adam = find_kernel(false);
  static const std::optional<c10::OperatorHandle> adamw = find_kernel(true);
  return decoupled ? adamw : adam;
}

void require_kernel(const std::vector<at::Tensor>& params, bool decoupled) {
  for (const auto& param : params) {
    if (!fused_adam_available(param.device().type(), decoupled)) {
      throw std::invalid_argument(std::string(decoupled ? "AdamW" : "Adam") +
                                  " with fused=true: this LibTorch (" + TORCH_VERSION +
                                  ") has no " + kernel_name(decoupled) + " kernel for " +
                                  c10::DeviceTypeName(param.device().type(), /*lower_case=*/true) +
                                  " tensors (PyTorch has it on the CPU from 2.4); drop \"fused\"");
    }
  }
}

// One param group's tensors as the kernel takes them, each parameter's step
// counted first (the kernel reads the step it is taking, as a float tensor
// on the parameter's device, which is how PyTorch keeps it).
struct Lists {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
};

Lists lists_of(Optimizer& optimizer, const std::vector<at::Tensor>& params, bool amsgrad) {
  Lists lists;
  for (const auto& param : params) {
    if (!param.grad().defined()) continue;
    auto& slot = optimizer.state()[compat::optimizer_state_key(param)];
    if (!slot) {
      auto fresh = std::make_unique<AdamParamState>();
      fresh->step(0);
      fresh->exp_avg(at::zeros_like(param, at::MemoryFormat::Preserve));
      fresh->exp_avg_sq(at::zeros_like(param, at::MemoryFormat::Preserve));
      if (amsgrad) fresh->max_exp_avg_sq(at::zeros_like(param, at::MemoryFormat::Preserve));
      slot = std::move(fresh);
    }
    auto& state = static_cast<AdamParamState&>(*slot);
    state.step(state.step() + 1);
    lists.params.push_back(param);
    lists.grads.push_back(param.grad());
    lists.exp_avgs.push_back(state.exp_avg());
    lists.exp_avg_sqs.push_back(state.exp_avg_sq());
    if (amsgrad) lists.max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
    lists.steps.push_back(
        at::scalar_tensor(static_cast<double>(state.step()), param.options().dtype(at::kFloat)));
  }
  return lists;
}

template <typename Options>
at::Tensor fused_step(Optimizer& optimizer, const Optimizer::LossClosure& closure, bool decoupled) {
  at::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  torch::NoGradGuard no_grad;
  const auto call = kernel(decoupled)->typed<FusedKernel>();
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const Options&>(group.options());
    const Lists lists = lists_of(optimizer, group.params(), options.amsgrad());
    if (lists.params.empty()) continue;
    call.call(lists.params, lists.grads, lists.exp_avgs, lists.exp_avg_sqs, lists.max_exp_avg_sqs,
              lists.steps, options.lr(), std::get<0>(options.betas()), std::get<1>(options.betas()),
              options.weight_decay(), options.eps(), options.amsgrad(), /*maximize=*/false,
              c10::nullopt, c10::nullopt);
  }
  return loss;
}

}  // namespace

bool fused_adam_available(c10::DeviceType device, bool decoupled) {
  const auto& handle = kernel(decoupled);
  if (!handle) return false;
  const auto key = device == c10::DeviceType::CUDA  ? c10::DispatchKey::CUDA
                   : device == c10::DeviceType::CPU ? c10::DispatchKey::CPU
                                                    : c10::DispatchKey::Undefined;
  return key != c10::DispatchKey::Undefined && handle->hasKernelForDispatchKey(key);
}

FusedAdam::FusedAdam(std::vector<at::Tensor> params, torch::optim::AdamOptions options)
    : Adam(params, std::move(options)) {
  require_kernel(params, /*decoupled=*/false);
}

at::Tensor FusedAdam::step(LossClosure closure) {
  return fused_step<torch::optim::AdamOptions>(*this, closure, /*decoupled=*/false);
}

FusedAdamW::FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions options)
    : AdamW(params, std::move(options)) {
  require_kernel(params, /*decoupled=*/true);
}

at::Tensor FusedAdamW::step(LossClosure closure) {
  return fused_step<torch::optim::AdamWOptions>(*this, closure, /*decoupled=*/true);
}

}  // namespace engine::optim
