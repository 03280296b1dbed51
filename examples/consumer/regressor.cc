#include "regressor.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/sgd.h>

#include "engine/dist/info.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/optim/optim_wrapper.h"

namespace consumer {

Regressor::Regressor(int64_t inputs, int64_t outputs) {
  weight = register_parameter("weight", at::zeros({outputs, inputs}, at::kDouble));
  bias = register_parameter("bias", at::zeros({outputs}, at::kDouble));
}

TensorDict Regressor::forward(const TensorDict& data, engine::model::ForwardMode mode) {
  at::Tensor output = at::linear(data.at("input"), weight, bias);
  if (mode != engine::model::ForwardMode::kLoss) return {{"output", output}};
  return {{"loss", at::mse_loss(output, data.at("target"))}};
}

TensorDict make_batch(int64_t size, int64_t inputs, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor input = at::randn({size, inputs}, generator, at::kDouble);
  at::Tensor noise = at::randn({size, 1}, generator, at::kDouble) * 0.1;
  return {{"input", input}, {"target", 2 * input.sum(1, true) - 1 + noise}};
}

std::vector<double> train(const std::shared_ptr<Regressor>& model,
                          const std::vector<TensorDict>& batches, double learning_rate) {
  auto optimizer = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                       torch::optim::SGDOptions(learning_rate));
  engine::optim::OptimWrapper optim_wrapper(optimizer);
  std::shared_ptr<engine::model::BaseModel> trained = model;
  if (engine::dist::get_world_size() > 1) {
    trained = std::make_shared<engine::model::MMDistributedDataParallel>(model);
  }
  std::vector<double> losses;
  for (const auto& batch : batches) {
    losses.push_back(trained->train_step(batch, optim_wrapper).at("loss").item<double>());
  }
  return losses;
}

}  // namespace consumer
