#include "tools/bench/mlp.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>

#include "engine/model/unit_call.h"

namespace bench {

MlpShape mlp_shape(const std::string& model) {
  if (model == "small") return {1024, 3};
  if (model == "large") return {2048, 6};
  if (model == "xl") return {4096, 6};
  return {0, 0};
}

Mlp::Mlp(MlpShape shape) {
  for (int i = 0; i < shape.hidden_layers; ++i) {
    linears_->push_back(torch::nn::Linear(shape.width, shape.width));
  }
  linears_->push_back(torch::nn::Linear(shape.width, 10));
  register_module("layers", linears_);
}

engine::model::TensorDict Mlp::forward(const engine::model::TensorDict& data,
                                       engine::model::ForwardMode) {
  at::Tensor x = data.at("inputs");
  for (size_t i = 0; i < linears_->size(); ++i) {
    auto linear = linears_->ptr<torch::nn::LinearImpl>(i);
    x = engine::model::call_unit(*linear, [&] { return linear->forward(x); });
    if (i + 1 < linears_->size()) x = torch::nn::functional::relu(x);
  }
  return {{"loss", torch::nn::functional::cross_entropy(x, data.at("labels"))}};
}

engine::model::TensorDict mlp_batch(MlpShape shape, int64_t batch) {
  return {{"inputs", at::randn({batch, shape.width})},
          {"labels", at::randint(10, {batch}, at::kLong)}};
}

void finish_queued_work(at::Device device) {
  if (device.is_cpu()) return;
  // A copy to the host waits for everything queued before it on the stream.
  (void)at::zeros({1}, at::TensorOptions().device(device)).item<float>();
}

}  // namespace bench
