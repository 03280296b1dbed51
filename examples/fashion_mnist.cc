#include "examples/fashion_mnist.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>
#include <torch/data/datasets/mnist.h>
#include <zlib.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "engine/io/atomic_file.h"

namespace examples {
namespace {

// The training images' mean and standard deviation.
constexpr double kMean = 0.2860;
constexpr double kDeviation = 0.3530;

// The file names LibTorch's MNIST reader opens, gzipped in the package.
const std::vector<std::string> kFiles = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

std::string gunzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) {
    throw std::runtime_error("cannot open " + path +
                             ": install Debian's dataset-fashion-mnist (bash tools/setup.sh) "
                             "or set the dataset's \"root\"");
  }
  std::string content;
  char chunk[1 << 16];
  int read = 0;
  while ((read = gzread(file, chunk, sizeof chunk)) > 0) content.append(chunk, read);
  const bool failed = read < 0;
  gzclose(file);
  if (failed) throw std::runtime_error(path + " is not a readable gzip file");
  return content;
}

void unpack(const std::string& root, const std::string& unpack_dir) {
  std::filesystem::create_directories(unpack_dir);
  for (const auto& name : kFiles) {
    if (std::filesystem::exists(unpack_dir + "/" + name)) continue;
    const std::string content = gunzip(root + "/" + name + ".gz");
    engine::io::write_atomically(unpack_dir + "/" + name, {content});
  }
}

struct Split {
  at::Tensor images, labels;
};

// One copy per process of each split, read once.
Split load(const FashionMnistOptions& options, const std::string& unpack_dir) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::string>, Split> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(options.root, options.split);
  auto found = loaded.find(key);
  if (found != loaded.end()) return found->second;
  unpack(options.root, unpack_dir);
  torch::data::datasets::MNIST reader(unpack_dir, options.split == "train"
                                                      ? torch::data::datasets::MNIST::Mode::kTrain
                                                      : torch::data::datasets::MNIST::Mode::kTest);
  Split split{(reader.images() - kMean) / kDeviation, reader.targets()};
  return loaded.emplace(key, split).first->second;
}

}  // namespace

FashionMnist::FashionMnist(const FashionMnistOptions& options, const std::string& unpack_dir)
    : flip_(options.flip) {
  if (options.split != "train" && options.split != "test") {
    throw std::invalid_argument("FashionMNIST's split is \"train\" or \"test\", got \"" +
                                options.split + "\"");
  }
  Split split = load(options, unpack_dir);
  images_ = split.images;
  labels_ = split.labels;
}

engine::model::TensorDict FashionMnist::batch(const std::vector<int64_t>& indices,
                                              at::Generator* rng) const {
  const at::Tensor index = at::tensor(indices, at::kLong);
  at::Tensor images = images_.index_select(0, index);
  if (rng && flip_ > 0) {
    const at::Tensor mirrored = at::rand({images.size(0), 1, 1, 1}, *rng) < flip_;
    images = at::where(mirrored, images.flip({3}), images);
  }
  return {{"inputs", images}, {"labels", labels_.index_select(0, index)}};
}

FashionMnistOptions fashion_mnist_options(engine::registry::ConfigReader& config) {
  FashionMnistOptions options;
  options.root = config.get("root", options.root);
  options.split = config.get("split", options.split);
  options.flip = config.get("flip", options.flip);
  config.finish();
  return options;
}

}  // namespace examples
