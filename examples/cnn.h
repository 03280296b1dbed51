#pragma once

#include <ATen/core/Generator.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>

#include "engine/model/base_model.h"
#include "engine/model/batch_norm.h"
#include "engine/registry/config.h"

namespace examples {

struct CnnOptions {
  int64_t channels = 1;  // of the 28x28 input images
  int64_t conv1 = 16;
  int64_t conv2 = 32;
  int64_t hidden = 128;
  int64_t classes = 10;
};

// A LeNet-sized network for 28x28 images: two blocks of 5x5 convolution,
// engine BatchNorm, ReLU and 2x2 max pooling, then Linear -> ReLU -> Linear.
// Answers in the forward modes as Classifier does (classify()).
class Cnn : public engine::model::BaseModel {
 public:
  // Weights drawn from `rng` (PyTorch's default bounds).
  Cnn(const CnnOptions& options, at::Generator& rng);
  engine::model::TensorDict forward(const engine::model::TensorDict& data,
                                    engine::model::ForwardMode mode) override;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  engine::model::BatchNorm norm1_{nullptr}, norm2_{nullptr};
  torch::nn::Linear hidden_{nullptr}, output_{nullptr};
};

CnnOptions cnn_options(engine::registry::ConfigReader& config);

}  // namespace examples
