#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "engine/model/base_model.h"

// A team's model and training loop, written against dist-engine only.
namespace consumer {

using engine::model::TensorDict;

// y = x W^T + b, trained on the mean squared error against "target".
class Regressor : public engine::model::BaseModel {
 public:
  Regressor(int64_t inputs, int64_t outputs);

  // "input" [N, inputs] -> "loss" (kLoss) or "output" (kPredict, kTensor).
  TensorDict forward(const TensorDict& data, engine::model::ForwardMode mode) override;

  at::Tensor weight, bias;
};

// A batch of `size` samples of y = 2x - 1 plus noise, float64, drawn from
// `seed`.
TensorDict make_batch(int64_t size, int64_t inputs, uint64_t seed);

// Trains `model` with SGD, one step per batch; under init_dist (more than
// one rank) through MMDistributedDataParallel, so that gradients are
// averaged over the ranks. Returns each step's loss as logged (averaged
// over the ranks).
std::vector<double> train(const std::shared_ptr<Regressor>& model,
                          const std::vector<TensorDict>& batches, double learning_rate);

}  // namespace consumer
