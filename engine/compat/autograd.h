#pragma once

// The autograd internals whose types changed within LibTorch 2.x, behind one
// name each, so that the engine's code reads the same against every
// LibTorch it builds with. Autograd nodes were held by std::shared_ptr (and
// freed through torch::autograd::deleteNode) up to the 2026 releases that
// moved them to c10::intrusive_ptr; which one a LibTorch uses is read from
// its own declarations, not from its version number. The only place in the
// engine that asks.

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <type_traits>
#include <utility>

namespace engine::compat {

// An owning reference to an autograd node, as this LibTorch holds them.
using NodePtr =
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

inline constexpr bool kIntrusiveNodes =
    !std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>;

// A new node of type T (a torch::autograd::Node), owned as autograd expects.
template <typename T>
auto make_node() {
  if constexpr (kIntrusiveNodes) {
    return c10::make_intrusive<T>();
  } else {
    // deleteNode (found through T's base) frees long chains without recursion.
    return std::shared_ptr<T>(new T(), [](T* node) { deleteNode(node); });
  }
}

// Makes `param` forget its gradient accumulator, so that the next
// grad_accumulator(param) builds one for its current metadata.
template <typename Ptr = NodePtr>
void forget_grad_accumulator(const at::Tensor& param) {
  using Node = typename Ptr::element_type;  // dependent: only one branch is instantiated
  if constexpr (kIntrusiveNodes) {
    torch::autograd::impl::set_grad_accumulator(param, c10::weak_intrusive_ptr<Node>(Ptr()));
  } else {
    torch::autograd::impl::set_grad_accumulator(param, std::weak_ptr<Node>(Ptr()));
  }
}

}  // namespace engine::compat
