#include "engine/dist/reduce_kernel.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <type_traits>

namespace engine::dist {
namespace {

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else if constexpr (std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>) {
    return std::isnan(static_cast<float>(v));
  } else {
    return false;
  }
}

// The loops are kept trivial so that the compiler vectorizes them (with the
// cost model that engine/dist/BUILD sets for this library).
template <typename T>
struct InPlace {
  T* __restrict acc;
  const T* __restrict src;
  int64_t count;
  template <typename F>
  void operator()(F f) const {
    for (int64_t i = 0; i < count; ++i) acc[i] = f(acc[i], src[i]);
  }
};

template <typename T>
struct ToOutput {
  T* __restrict out;
  const T* __restrict left;
  const T* __restrict right;
  int64_t count;
  template <typename F>
  void operator()(F f) const {
    for (int64_t i = 0; i < count; ++i) out[i] = f(left[i], right[i]);
  }
};

// Integer sums and products wrap around, as PyTorch's do. They are computed
// in an unsigned type of at least int's width, where wrapping is defined: a
// signed overflow is undefined behaviour, and so is an unsigned short's
// product once promoted to int.
template <typename T>
using Wrapping =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Wrapping<T>>(a) + static_cast<Wrapping<T>>(b));
  } else {
    return static_cast<T>(a + b);
  }
}

template <typename T>
T multiply(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Wrapping<T>>(a) * static_cast<Wrapping<T>>(b));
  } else {
    return static_cast<T>(a * b);
  }
}

// Runs `loop` with the elementwise function of `op` on T.
template <typename T, typename Loop>
void reduce_typed(const Loop& loop, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      if constexpr (std::is_same_v<T, bool>) {
        return loop([](bool a, bool b) { return a || b; });
      } else {
        return loop(add<T>);
      }
    case ReduceOp::kProduct:
      if constexpr (std::is_same_v<T, bool>) {
        return loop([](bool a, bool b) { return a && b; });
      } else {
        return loop(multiply<T>);
      }
    case ReduceOp::kMin:
      return loop([](T a, T b) { return (is_nan(a) || a < b) ? a : b; });
    case ReduceOp::kMax:
      return loop([](T a, T b) { return (is_nan(a) || a > b) ? a : b; });
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      if constexpr (std::is_integral_v<T>) {
        if (op == ReduceOp::kBand) return loop([](T a, T b) { return static_cast<T>(a & b); });
        if (op == ReduceOp::kBor) return loop([](T a, T b) { return static_cast<T>(a | b); });
        return loop([](T a, T b) { return static_cast<T>(a ^ b); });
      }
      return;
  }
}

}  // namespace

bool can_reduce(c10::ScalarType dtype, ReduceOp op) {
  const bool integral = c10::isIntegralType(dtype, /*includeBool=*/true);
  const bool floating = dtype == c10::kFloat || dtype == c10::kDouble || dtype == c10::kHalf ||
                        dtype == c10::kBFloat16;
  return integral || (floating && !is_bitwise(op));
}

void reduce_into(void* acc, const void* src, int64_t count, c10::ScalarType dtype, ReduceOp op) {
  AT_DISPATCH_ALL_TYPES_AND3(c10::kHalf, c10::kBFloat16, c10::kBool, dtype, "sim_reduce", [&] {
    using T = scalar_t;
    reduce_typed<T>(InPlace<T>{static_cast<T*>(acc), static_cast<const T*>(src), count}, op);
  });
}

void reduce_to(void* out, const void* left, const void* right, int64_t count, c10::ScalarType dtype,
               ReduceOp op) {
  AT_DISPATCH_ALL_TYPES_AND3(c10::kHalf, c10::kBFloat16, c10::kBool, dtype, "reduce_to", [&] {
    using T = scalar_t;
    reduce_typed<T>(ToOutput<T>{static_cast<T*>(out), static_cast<const T*>(left),
                                static_cast<const T*>(right), count},
                    op);
  });
}

void divide_for_mean(at::Tensor& sum, int n) {
  if (c10::isIntegralType(sum.scalar_type(), /*includeBool=*/false)) {
    sum.div_(n, "trunc");
  } else {
    sum.div_(n);
  }
}

}  // namespace engine::dist
