#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

// A folder of named tensors in a form that Python reads without PyTorch's
// formats: tensors.json maps each name to its dtype ("float32" or "int64")
// and shape, and NAME.raw holds its elements, little-endian, row-major
// (a name may hold slashes: sub-folders). torch_reference.py reads and
// writes the same form.
namespace cross_check {

using Tensors = std::map<std::string, at::Tensor>;

// Throws std::runtime_error naming the file that is missing, unreadable or
// of the wrong size, or the dtype it does not know.
Tensors read_tensor_folder(const std::string& folder);

// Creates `folder` (and its parents). Tensors of other dtypes are written as
// float32.
void write_tensor_folder(const std::string& folder, const Tensors& tensors);

}  // namespace cross_check
