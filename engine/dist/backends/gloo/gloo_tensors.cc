#include "engine/dist/backends/gloo/gloo_tensors.h"

#include <ATen/ops/empty.h>

#include <algorithm>

namespace engine::dist::gloo {

bool is_plain(const at::Tensor& tensor) {
  return tensor.device().is_cpu() && tensor.layout() == at::kStrided && tensor.is_contiguous();
}

at::Tensor plain(const at::Tensor& tensor) {
  if (is_plain(tensor)) return tensor;
  return at::empty(tensor.sizes(), tensor.options().device(at::kCPU)).copy_(tensor);
}

std::vector<at::Tensor> plain(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& tensor : tensors) out.push_back(plain(tensor));
  return out;
}

// Not view({-1}): a one-element tensor counts as contiguous whatever its
// stride, which a byte view refuses.
at::Tensor bytes_of(const at::Tensor& plain) {
  return plain.as_strided({plain.numel()}, {1}).view(at::kByte);
}

void copy_back(at::Tensor& original, const at::Tensor& copy) {
  if (!copy.is_same(original)) original.copy_(copy);
}

at::Tensor block_for(const at::Tensor& input, int ranks) {
  return at::empty({ranks, input.numel()}, input.options().device(at::kCPU));
}

void copy_rows(std::vector<at::Tensor> outputs, const at::Tensor& block) {
  for (size_t rank = 0; rank < outputs.size(); ++rank) {
    outputs[rank].copy_(block[static_cast<int64_t>(rank)].view(outputs[rank].sizes()));
  }
}

bool holds_one_input_a_rank(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                            int size) {
  return outputs.size() == static_cast<size_t>(size) &&
         std::all_of(outputs.begin(), outputs.end(), [&](const at::Tensor& output) {
           return output.scalar_type() == input.scalar_type() && output.numel() == input.numel();
         });
}

}  // namespace engine::dist::gloo
