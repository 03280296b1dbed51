#include "engine/dist/backend.h"

#include <ATen/core/Tensor.h>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

[[noreturn]] void unsupported(const Backend& backend, const char* operation) {
  throw InvalidArgument("group rank " + std::to_string(backend.rank()) + ": the " + backend.name() +
                        " backend does not implement " + operation + "; use a backend that does");
}

}  // namespace

#define ENGINE_DIST_UNSUPPORTED_CALL(name, parameters, ...) \
  WorkPtr Backend::name parameters { unsupported(*this, #name); }
ENGINE_DIST_BACKEND_CALLS(ENGINE_DIST_UNSUPPORTED_CALL)
#undef ENGINE_DIST_UNSUPPORTED_CALL

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
