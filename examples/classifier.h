#pragma once

#include <ATen/core/Generator.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/model/base_model.h"
#include "engine/model/batch_norm.h"
#include "engine/registry/config.h"
#include "engine/runner/runner.h"

// The demo's task: classify points drawn around random class centres.
namespace examples {

struct BlobsOptions {
  int64_t size = 1024;
  int64_t features = 16;
  int64_t classes = 4;
  double spread = 1.5;   // standard deviation around each centre
  double jitter = 0.05;  // training augmentation noise
  uint64_t seed = 0;     // the same seed gives the same dataset everywhere
};

// Generated in the process, nothing downloaded: sample i has class i mod
// classes. The centres depend on the seed only, so a train and a val set
// drawn with different seeds share their centres when centre_seed is equal.
class Blobs : public engine::runner::Dataset {
 public:
  Blobs(const BlobsOptions& options, uint64_t centre_seed);
  int64_t size() const override { return labels_.size(0); }
  engine::model::TensorDict batch(const std::vector<int64_t>& indices,
                                  at::Generator* rng) const override;

 private:
  double jitter_;
  at::Tensor inputs_;
  at::Tensor labels_;
};

struct ClassifierOptions {
  int64_t features = 16;
  int64_t hidden = 64;
  int64_t classes = 4;
};

// Linear -> BatchNorm -> ReLU -> Linear. Modes: "loss" gives
// {"loss": cross entropy}, "predict" {"pred", "label"}, "tensor" {"logits"}.
class Classifier : public engine::model::BaseModel {
 public:
  // Weights drawn from `rng` (PyTorch's default Linear bounds), so that runs
  // replay even when ranks share the process-wide generator.
  Classifier(const ClassifierOptions& options, at::Generator& rng);
  engine::model::TensorDict forward(const engine::model::TensorDict& data,
                                    engine::model::ForwardMode mode) override;

 private:
  torch::nn::Linear hidden_{nullptr};
  engine::model::BatchNorm norm_{nullptr};
  torch::nn::Linear output_{nullptr};
};

// Draws a layer's weight and bias as PyTorch's default initialisation does
// (uniform within 1/sqrt(fan_in)), from `rng`.
void draw_like_pytorch(at::Tensor& weight, at::Tensor& bias, at::Generator& rng);

// A classifier's answer in each forward mode: "loss" gives {"loss": cross
// entropy against data's "labels"}, "predict" {"pred", "label"}, "tensor"
// {"logits"}.
engine::model::TensorDict classify(const at::Tensor& logits, const engine::model::TensorDict& data,
                                   engine::model::ForwardMode mode);

// {"accuracy": share of samples whose "pred" equals their "label"}.
std::map<std::string, double> accuracy(const std::vector<c10::IValue>& samples);

ClassifierOptions classifier_options(engine::registry::ConfigReader& config);
BlobsOptions blobs_options(engine::registry::ConfigReader& config);

}  // namespace examples
