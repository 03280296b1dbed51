#include "engine/dist/backend.h"

#include <ATen/ATen.h>

namespace engine::dist {

WorkPtr Backend::all_gather_into_tensor(at::Tensor& output, const at::Tensor& input) {
  std::vector<int64_t> sizes{size()};
  sizes.insert(sizes.end(), input.sizes().begin(), input.sizes().end());
  std::vector<at::Tensor> blocks = output.view(sizes).unbind(0);
  return all_gather(blocks, input);
}

}  // namespace engine::dist
