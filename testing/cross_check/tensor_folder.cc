#include "testing/cross_check/tensor_folder.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

namespace cross_check {
namespace {

namespace fs = std::filesystem;

at::ScalarType dtype_named(const std::string& name, const std::string& tensor) {
  if (name == "float32") return at::kFloat;
  if (name == "int64") return at::kLong;
  throw std::runtime_error("tensor " + tensor + ": dtype " + name +
                           " is neither float32 nor int64");
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

Tensors read_tensor_folder(const std::string& folder) {
  const auto index = nlohmann::json::parse(read_bytes(fs::path(folder) / "tensors.json"));
  Tensors tensors;
  for (const auto& [name, entry] : index.items()) {
    const auto shape = entry.at("shape").get<std::vector<int64_t>>();
    const at::Tensor tensor =
        at::empty(shape, at::TensorOptions().dtype(dtype_named(entry.at("dtype"), name)));
    const fs::path path = fs::path(folder) / (name + ".raw");
    const std::string bytes = read_bytes(path);
    if (bytes.size() != tensor.nbytes()) {
      throw std::runtime_error(path.string() + ": " + std::to_string(bytes.size()) +
                               " bytes where its shape and dtype need " +
                               std::to_string(tensor.nbytes()));
    }
    std::copy(bytes.begin(), bytes.end(), static_cast<char*>(tensor.data_ptr()));
    tensors[name] = tensor;
  }
  return tensors;
}

void write_tensor_folder(const std::string& folder, const Tensors& tensors) {
  nlohmann::json index = nlohmann::json::object();
  for (const auto& [name, value] : tensors) {
    const at::Tensor tensor =
        value.scalar_type() == at::kLong ? value.contiguous() : value.to(at::kFloat).contiguous();
    index[name] = {{"dtype", tensor.scalar_type() == at::kLong ? "int64" : "float32"},
                   {"shape", tensor.sizes().vec()}};
    const fs::path path = fs::path(folder) / (name + ".raw");
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out.write(static_cast<const char*>(tensor.data_ptr()),
              static_cast<std::streamsize>(tensor.nbytes()));
    if (!out) throw std::runtime_error("cannot write " + path.string());
  }
  std::ofstream out(fs::path(folder) / "tensors.json");
  out << index.dump(1);
  if (!out) throw std::runtime_error("cannot write " + folder + "/tensors.json");
}

}  // namespace cross_check
