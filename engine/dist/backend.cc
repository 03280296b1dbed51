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

WorkPtr Backend::all_reduce(at::Tensor&, ReduceOp) { unsupported(*this, "all_reduce"); }
WorkPtr Backend::broadcast(at::Tensor&, int) { unsupported(*this, "broadcast"); }
WorkPtr Backend::reduce(at::Tensor&, int, ReduceOp) { unsupported(*this, "reduce"); }
WorkPtr Backend::all_gather(std::vector<at::Tensor>&, const at::Tensor&) {
  unsupported(*this, "all_gather");
}
WorkPtr Backend::gather(std::vector<at::Tensor>&, const at::Tensor&, int) {
  unsupported(*this, "gather");
}
WorkPtr Backend::scatter(at::Tensor&, const std::vector<at::Tensor>&, int) {
  unsupported(*this, "scatter");
}
WorkPtr Backend::reduce_scatter(at::Tensor&, const std::vector<at::Tensor>&, ReduceOp) {
  unsupported(*this, "reduce_scatter");
}
WorkPtr Backend::all_to_all(std::vector<at::Tensor>&, const std::vector<at::Tensor>&) {
  unsupported(*this, "all_to_all");
}
WorkPtr Backend::barrier() { unsupported(*this, "barrier"); }
WorkPtr Backend::send(const at::Tensor&, int, int) { unsupported(*this, "send"); }
WorkPtr Backend::recv(at::Tensor&, int, int) { unsupported(*this, "recv"); }

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
