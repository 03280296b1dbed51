#include "examples/cnn.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/relu.h>

#include "examples/classifier.h"

namespace examples {

Cnn::Cnn(const CnnOptions& options, at::Generator& rng) {
  using engine::model::BatchNormOptions;
  using torch::nn::Conv2dOptions;
  conv1_ = register_module(
      "conv1", torch::nn::Conv2d(Conv2dOptions(options.channels, options.conv1, 5).padding(2)));
  norm1_ = register_module("norm1", engine::model::BatchNorm(BatchNormOptions(options.conv1)));
  conv2_ =
      register_module("conv2", torch::nn::Conv2d(Conv2dOptions(options.conv1, options.conv2, 5)));
  norm2_ = register_module("norm2", engine::model::BatchNorm(BatchNormOptions(options.conv2)));
  // 28x28 -> 28 (padded) -> 14 (pool) -> 10 (5x5) -> 5 (pool).
  hidden_ = register_module("hidden", torch::nn::Linear(options.conv2 * 5 * 5, options.hidden));
  output_ = register_module("output", torch::nn::Linear(options.hidden, options.classes));
  draw_like_pytorch(conv1_->weight, conv1_->bias, rng);
  draw_like_pytorch(conv2_->weight, conv2_->bias, rng);
  draw_like_pytorch(hidden_->weight, hidden_->bias, rng);
  draw_like_pytorch(output_->weight, output_->bias, rng);
}

engine::model::TensorDict Cnn::forward(const engine::model::TensorDict& data,
                                       engine::model::ForwardMode mode) {
  at::Tensor x = at::max_pool2d(at::relu(norm1_(conv1_(data.at("inputs")))), 2);
  x = at::max_pool2d(at::relu(norm2_(conv2_(x))), 2);
  return classify(output_(at::relu(hidden_(x.flatten(1)))), data, mode);
}

CnnOptions cnn_options(engine::registry::ConfigReader& config) {
  CnnOptions options;
  options.channels = config.get("channels", options.channels);
  options.conv1 = config.get("conv1", options.conv1);
  options.conv2 = config.get("conv2", options.conv2);
  options.hidden = config.get("hidden", options.hidden);
  options.classes = config.get("classes", options.classes);
  config.finish();
  return options;
}

}  // namespace examples
