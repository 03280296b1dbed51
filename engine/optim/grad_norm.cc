#include "engine/optim/grad_norm.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cmath>

#include "engine/registry/attachments.h"

namespace engine::optim {
namespace {

registry::Attachments<c10::TensorImpl, GradNormSource>& sources() {
  static registry::Attachments<c10::TensorImpl, GradNormSource> instance;
  return instance;
}

}  // namespace

void attach_grad_norm_source(const at::Tensor& param, GradNormSource* source) {
  sources().attach(param.unsafeGetTensorImpl(), source);
}

void detach_grad_norm_source(const at::Tensor& param) {
  sources().detach(param.unsafeGetTensorImpl());
}

GradNormSource* grad_norm_source_of(const at::Tensor& param) {
  return sources().find(param.unsafeGetTensorImpl());
}

double local_power_sum(const std::vector<at::Tensor>& grads, double norm_type) {
  double total = 0;
  for (const auto& grad : grads) {
    if (!grad.defined() || grad.numel() == 0) continue;
    const at::Tensor magnitude = grad.detach().abs().to(at::kDouble);
    if (std::isinf(norm_type)) {
      total = std::max(total, magnitude.max().item<double>());
    } else {
      total += magnitude.pow(norm_type).sum().item<double>();
    }
  }
  return total;
}

}  // namespace engine::optim
