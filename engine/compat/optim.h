#pragma once

// How LibTorch's optimizers key their per-parameter state: by the
// parameter's TensorImpl address as a string up to 1.13, by the address
// itself in 2.x. Read from the declaration of Optimizer::state(), not from
// a version number. The only place in the engine that asks.

#include <torch/optim/optimizer.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace engine::compat {

using OptimizerStateKey = typename std::remove_reference_t<
    decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

// The key under which LibTorch's own optimizers keep `param`'s state. (A
// template only so that the branch this LibTorch does not take is not
// compiled.)
template <typename Key = OptimizerStateKey>
Key optimizer_state_key(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream address;  // as c10::guts::to_string writes it
    address << param.unsafeGetTensorImpl();
    return address.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

}  // namespace engine::compat
