#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace engine::dist {

// "Float[2, 3] cpu": how messages name a tensor.
std::string describe(const at::Tensor& tensor);
// "[2, 3]".
std::string describe(at::IntArrayRef shape);
// "0, 2-5, 7": a compact list of ranks.
std::string describe_ranks(const std::vector<int>& sorted_ranks);

}  // namespace engine::dist
