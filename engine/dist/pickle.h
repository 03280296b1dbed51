#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <functional>
#include <string>
#include <vector>

namespace engine::dist {

// An IValue as a 1-D uint8 tensor in the torch.save format, and back.
// unpickle throws MalformedInput naming `what` when the bytes are not a
// pickle, or ask for more than check_pickle_archive (pickle_bounds.h) allows:
// nothing from outside the process reaches LibTorch's unpickler unchecked.
// Every tensor comes back with its shape, strides, dtype and values. A
// contiguous view of part of a storage travels as its own elements, not the
// whole storage (torch.save writes the whole), and comes back sharing
// nothing; an empty view at a storage offset comes back at offset 0
// (LibTorch 2.x loads no other form of it).
at::Tensor pickle(const c10::IValue& value);
c10::IValue unpickle(const at::Tensor& bytes, const std::string& what);

// As pickle, but with lists and dicts as Python's own: without the type
// tags (torch.jit._pickle.restore_type_tag) that LibTorch's pickler adds and
// torch.load(weights_only=True) refuses. unpickle gives them back holding
// Any (read with toList() and toGenericDict(), not toIntVector()).
at::Tensor pickle_untagged(const c10::IValue& value);

// `value` with every tensor in it replaced by `map(tensor)`: dicts, lists
// and tuples rebuilt, every other value shared. A tensor met more than once
// (one TensorImpl) is mapped once, so what was tied stays tied; views of one
// storage are mapped each on its own.
c10::IValue map_tensors(const c10::IValue& value,
                        const std::function<at::Tensor(const at::Tensor&)>& map);

// A 1-D uint8 tensor that takes over `bytes` (no copy): how serializers that
// write into a vector hand over large archives.
at::Tensor adopt_bytes(std::vector<char>&& bytes);

}  // namespace engine::dist
