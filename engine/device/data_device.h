#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

// Finding and moving the device of a batch, after mmengine.dist's
// get_data_device and cast_data_device. "Data" is a tensor, or a list, tuple
// or dict whose values are data, to any depth. Errors are
// dist::InvalidArgument naming the rank:
// - empty data (an empty list, tuple or dict at any depth);
// - tensors on different devices (get_data_device only);
// - anything else than a tensor, list, tuple or dict (a string, a number...);
// - an `out` of another shape than `data` (see cast_data_device).
namespace engine::device {

// The one device every tensor in `data` is on.
at::Device get_data_device(const c10::IValue& data);
at::Device get_data_device(const at::Tensor& data);
at::Device get_data_device(const std::vector<at::Tensor>& data);
at::Device get_data_device(const std::map<std::string, at::Tensor>& data);

// `data` with every tensor on `device`, in containers of the same kind and
// element types. A tensor already there is returned as is (no copy).
//
// With `out`: it must have the same structure as `data` (the same container
// kinds, lengths and dict keys), and each of its tensors is overwritten in
// place (copy_) with the corresponding tensor of the result; the result is
// still returned. mmengine zips lists of different lengths and drops the
// rest silently; here that is an error.
c10::IValue cast_data_device(const c10::IValue& data, at::Device device,
                             const std::optional<c10::IValue>& out = std::nullopt);
at::Tensor cast_data_device(const at::Tensor& data, at::Device device,
                            const std::optional<at::Tensor>& out = std::nullopt);
std::vector<at::Tensor> cast_data_device(
    const std::vector<at::Tensor>& data, at::Device device,
    const std::optional<std::vector<at::Tensor>>& out = std::nullopt);
std::map<std::string, at::Tensor> cast_data_device(
    const std::map<std::string, at::Tensor>& data, at::Device device,
    const std::optional<std::map<std::string, at::Tensor>>& out = std::nullopt);

}  // namespace engine::device
