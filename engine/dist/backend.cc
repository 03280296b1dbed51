#include "engine/dist/backend.h"

#include <ATen/ATen.h>

namespace engine::dist {

WorkPtr Backend::all_gather_into_tensor(at::Tensor& output, const at::Tensor& input) {
  std::vector<int64_t> sizes{size()};
  sizes.insert(sizes.end(), input.sizes().begin(), input.sizes().end());
  std::vector<at::Tensor> blocks = output.view(sizes).unbind(0);
  return all_gather(blocks, input);
}

WorkPtr Backend::reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  std::vector<at::Tensor> blocks = input.view({size(), output.numel()}).unbind(0);
  for (auto& block : blocks) block = block.view(output.sizes());
  return reduce_scatter(output, blocks, op);
}

}  // namespace engine::dist
