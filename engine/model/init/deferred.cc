#include "engine/model/init/deferred.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/variable.h>

#include "engine/dist/errors.h"

namespace engine::model::init {
namespace {

// Points `tensor`'s own TensorImpl at `replacement`'s storage, shape and
// backend: what set_data does, without its check that both come from one
// backend, which is what forbids meta <-> CPU there. Both are plain dense
// TensorImpls, and a tensor without a gradient accumulator has no autograd
// record of its device, so nothing else refers to the old backend.
void replace_in_place(const at::Tensor& tensor, const at::Tensor& replacement) {
  tensor.unsafeGetTensorImpl()->shallow_copy_from(replacement.getIntrusivePtr());
}

// The module's parameters and buffers (its submodules' too when `recurse`).
std::vector<at::Tensor> state_of(const torch::nn::Module& module, bool recurse) {
  std::vector<at::Tensor> tensors = module.parameters(recurse);
  for (const auto& buffer : module.buffers(recurse)) tensors.push_back(buffer);
  return tensors;
}

}  // namespace

void defer(torch::nn::Module& module) {
  for (const auto& item : module.named_parameters()) {
    if (torch::autograd::impl::try_get_grad_accumulator(item.value())) {
      throw dist::InvalidArgument(
          "defer: the parameter \"" + item.key() +
          "\" is in an autograd graph still alive (an output of a forward is held), which "
          "recorded its device; defer the module before running it, or drop its outputs first");
    }
  }
  for (const auto& tensor : state_of(module, /*recurse=*/true)) {
    if (tensor.defined() && !tensor.is_meta()) {
      replace_in_place(tensor, at::empty(tensor.sizes(), tensor.options().device(at::kMeta)));
    }
  }
}

std::vector<std::string> deferred_names(const torch::nn::Module& module, bool recurse) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters(recurse)) {
    if (item.value().defined() && item.value().is_meta()) names.push_back(item.key());
  }
  for (const auto& item : module.named_buffers(recurse)) {
    if (item.value().defined() && item.value().is_meta()) names.push_back(item.key());
  }
  return names;
}

bool materialize(torch::nn::Module& module, c10::Device device) {
  bool any = false;
  for (const auto& tensor : state_of(module, /*recurse=*/false)) {
    if (!tensor.defined() || !tensor.is_meta()) continue;
    replace_in_place(tensor, at::zeros(tensor.sizes(), tensor.options().device(device)));
    any = true;
  }
  return any;
}

}  // namespace engine::model::init
