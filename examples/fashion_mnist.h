#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/registry/config.h"
#include "engine/runner/runner.h"

// Fashion-MNIST (60,000 training and 10,000 test images of clothes, 28x28,
// 10 classes) from Debian's dataset-fashion-mnist package.
namespace examples {

struct FashionMnistOptions {
  // The package's gzipped IDX files.
  std::string root = "/usr/share/datasets/fashion-mnist";
  std::string split = "train";  // or "test"
  // Training augmentation: each image mirrored left-right with this chance.
  double flip = 0.0;
};

// The images normalised with the training set's mean and deviation, as
// {"inputs": [B, 1, 28, 28] float, "labels": [B] long}. The files are
// unpacked once into `unpack_dir` (whole files or none) and read with
// LibTorch's MNIST reader; ranks sharing a process share one copy.
class FashionMnist : public engine::runner::Dataset {
 public:
  FashionMnist(const FashionMnistOptions& options, const std::string& unpack_dir);
  int64_t size() const override { return labels_.size(0); }
  engine::model::TensorDict batch(const std::vector<int64_t>& indices,
                                  at::Generator* rng) const override;

 private:
  double flip_;
  at::Tensor images_;
  at::Tensor labels_;
};

FashionMnistOptions fashion_mnist_options(engine::registry::ConfigReader& config);

}  // namespace examples
