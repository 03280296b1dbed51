#include "examples/classifier.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/normal.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/functional/loss.h>

namespace examples {

Blobs::Blobs(const BlobsOptions& options, uint64_t centre_seed) : jitter_(options.jitter) {
  auto centre_rng = at::make_generator<at::CPUGeneratorImpl>(centre_seed);
  const at::Tensor centres =
      at::normal(0.0, 1.0, {options.classes, options.features}, centre_rng, at::kFloat);
  auto rng = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  labels_ = at::arange(options.size, at::kLong).remainder(options.classes);
  inputs_ = centres.index_select(0, labels_) +
            at::normal(0.0, options.spread, {options.size, options.features}, rng, at::kFloat);
}

engine::model::TensorDict Blobs::batch(const std::vector<int64_t>& indices,
                                       at::Generator* rng) const {
  const at::Tensor index = at::tensor(indices, at::kLong);
  at::Tensor inputs = inputs_.index_select(0, index);
  if (rng && jitter_ > 0) {
    inputs = inputs + at::normal(0.0, jitter_, inputs.sizes(), *rng, at::kFloat);
  }
  return {{"inputs", inputs}, {"labels", labels_.index_select(0, index)}};
}

Classifier::Classifier(const ClassifierOptions& options, at::Generator& rng) {
  hidden_ = register_module("hidden", torch::nn::Linear(options.features, options.hidden));
  norm_ = register_module(
      "norm", engine::model::BatchNorm(engine::model::BatchNormOptions(options.hidden)));
  output_ = register_module("output", torch::nn::Linear(options.hidden, options.classes));
  for (auto* layer : {hidden_.get(), output_.get()})
    draw_like_pytorch(layer->weight, layer->bias, rng);
}

engine::model::TensorDict Classifier::forward(const engine::model::TensorDict& data,
                                              engine::model::ForwardMode mode) {
  return classify(output_(at::relu(norm_(hidden_(data.at("inputs"))))), data, mode);
}

void draw_like_pytorch(at::Tensor& weight, at::Tensor& bias, at::Generator& rng) {
  c10::NoGradGuard no_grad;
  const double bound = 1.0 / std::sqrt(static_cast<double>(weight.numel() / weight.size(0)));
  weight.uniform_(-bound, bound, rng);
  bias.uniform_(-bound, bound, rng);
}

engine::model::TensorDict classify(const at::Tensor& logits, const engine::model::TensorDict& data,
                                   engine::model::ForwardMode mode) {
  switch (mode) {
    case engine::model::ForwardMode::kLoss:
      return {{"loss", torch::nn::functional::cross_entropy(logits, data.at("labels"))}};
    case engine::model::ForwardMode::kPredict:
      return {{"pred", logits.argmax(1)}, {"label", data.at("labels")}};
    case engine::model::ForwardMode::kTensor:
      break;
  }
  return {{"logits", logits}};
}

std::map<std::string, double> accuracy(const std::vector<c10::IValue>& samples) {
  int64_t correct = 0;
  for (const auto& sample : samples) {
    const auto fields = sample.toGenericDict();
    correct += at::equal(fields.at("pred").toTensor(), fields.at("label").toTensor());
  }
  return {{"accuracy", samples.empty() ? 0.0 : static_cast<double>(correct) / samples.size()}};
}

ClassifierOptions classifier_options(engine::registry::ConfigReader& config) {
  ClassifierOptions options;
  options.features = config.get("features", options.features);
  options.hidden = config.get("hidden", options.hidden);
  options.classes = config.get("classes", options.classes);
  config.finish();
  return options;
}

BlobsOptions blobs_options(engine::registry::ConfigReader& config) {
  BlobsOptions options;
  options.size = config.get("size", options.size);
  options.features = config.get("features", options.features);
  options.classes = config.get("classes", options.classes);
  options.spread = config.get("spread", options.spread);
  options.jitter = config.get("jitter", options.jitter);
  options.seed = static_cast<uint64_t>(config.get<int64_t>("seed", 0));
  config.finish();
  return options;
}

}  // namespace examples
