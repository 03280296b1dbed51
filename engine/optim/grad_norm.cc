#include "engine/optim/grad_norm.h"

#include <ATen/ATen.h>

#include <cmath>
#include <mutex>
#include <unordered_map>

namespace engine::optim {
namespace {

struct Sources {
  std::mutex mutex;
  std::unordered_map<const c10::TensorImpl*, GradNormSource*> by_param;
};

Sources& sources() {
  static Sources instance;
  return instance;
}

}  // namespace

void attach_grad_norm_source(const at::Tensor& param, GradNormSource* source) {
  std::lock_guard<std::mutex> lock(sources().mutex);
  sources().by_param[param.unsafeGetTensorImpl()] = source;
}

void detach_grad_norm_source(const at::Tensor& param) {
  std::lock_guard<std::mutex> lock(sources().mutex);
  sources().by_param.erase(param.unsafeGetTensorImpl());
}

GradNormSource* grad_norm_source_of(const at::Tensor& param) {
  std::lock_guard<std::mutex> lock(sources().mutex);
  auto it = sources().by_param.find(param.unsafeGetTensorImpl());
  return it == sources().by_param.end() ? nullptr : it->second;
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
