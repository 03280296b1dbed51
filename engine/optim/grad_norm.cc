#include "engine/optim/grad_norm.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/isfinite.h>

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

GradsBySource group_by_source(const std::vector<at::Tensor>& params) {
  GradsBySource out;
  for (const auto& param : params) {
    GradNormSource* source = grad_norm_source_of(param);
    if (source == nullptr) {
      out.local_grads.push_back(param.grad());
      continue;
    }
    auto it = std::find(out.sources.begin(), out.sources.end(), source);
    if (it == out.sources.end()) {
      out.sources.push_back(source);
      out.owned.emplace_back();
      it = out.sources.end() - 1;
    }
    out.owned[it - out.sources.begin()].push_back(param);
  }
  return out;
}

bool any_non_finite_gradient(const std::vector<at::Tensor>& params) {
  const GradsBySource by_source = group_by_source(params);
  bool found = local_non_finite(by_source.local_grads);
  // Every source is asked, whatever the others found: each is a collective.
  for (size_t i = 0; i < by_source.sources.size(); ++i) {
    found = by_source.sources[i]->any_non_finite(by_source.owned[i]) || found;
  }
  return found;
}

bool local_non_finite(const std::vector<at::Tensor>& grads) {
  for (const auto& grad : grads) {
    if (grad.defined() && grad.numel() > 0 && !at::isfinite(grad.detach()).all().item<bool>())
      return true;
  }
  return false;
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
