#include "engine/dist/describe.h"

namespace engine::dist {

std::string describe(at::IntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string describe(const at::Tensor& tensor) {
  if (!tensor.defined()) return "undefined";
  return std::string(c10::toString(tensor.scalar_type())) + describe(tensor.sizes()) + " " +
         tensor.device().str();
}

std::string describe_ranks(const std::vector<int>& sorted_ranks) {
  std::string out;
  for (size_t i = 0; i < sorted_ranks.size();) {
    size_t j = i;
    while (j + 1 < sorted_ranks.size() && sorted_ranks[j + 1] == sorted_ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(sorted_ranks[i]);
    if (j > i) out += "-" + std::to_string(sorted_ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace engine::dist
