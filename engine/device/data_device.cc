#include "engine/device/data_device.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>

#include <sstream>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"

namespace engine::device {
namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw dist::InvalidArgument(dist::on_rank(dist::get_rank(), what));
}

bool is_container(const c10::IValue& data) {
  return data.isGenericDict() || data.isList() || data.isTuple();
}

void require_data(const char* function, const c10::IValue& data) {
  if (data.isTensor() || is_container(data)) return;
  refuse(std::string(function) + ": data must be a tensor or a list, tuple or dict of data, got " +
         data.tagKind());
}

// The values of a list or a tuple.
c10::ArrayRef<c10::IValue> elements_of(const c10::IValue& sequence) {
  return sequence.isList() ? sequence.toListRef() : sequence.toTupleRef().elements();
}

size_t length_of(const c10::IValue& container) {
  return container.isGenericDict() ? container.toGenericDict().size()
                                   : elements_of(container).size();
}

void require_nonempty(const char* function, const c10::IValue& container) {
  if (length_of(container) == 0) {
    refuse(std::string(function) + ": data holds an empty " + container.tagKind() +
           "; every list, tuple and dict in it needs at least one value");
  }
}

// `out` mirrors `data` at this level: the same kind and length.
void require_same_shape(const c10::IValue& data, const c10::IValue& out) {
  if (data.tagKind() != out.tagKind() ||
      (is_container(data) && length_of(data) != length_of(out))) {
    std::ostringstream what;
    what << "cast_data_device: out must have the structure of data, got data " << data.tagKind();
    if (is_container(data)) what << " of " << length_of(data);
    what << " and out " << out.tagKind();
    if (is_container(out)) what << " of " << length_of(out);
    refuse(what.str());
  }
}

c10::IValue cast_dict(const c10::impl::GenericDict& data, at::Device device,
                      const std::optional<c10::IValue>& out) {
  c10::impl::GenericDict result(data.keyType(), data.valueType());
  const std::optional<c10::impl::GenericDict> out_dict =
      out ? std::optional(out->toGenericDict()) : std::nullopt;
  for (const auto& entry : data) {
    std::optional<c10::IValue> out_value;
    if (out_dict) {
      auto found = out_dict->find(entry.key());
      if (found == out_dict->end()) {
        std::ostringstream what;
        what << "cast_data_device: out has no key " << entry.key() << " that data has";
        refuse(what.str());
      }
      out_value = found->value();
    }
    result.insert(entry.key(), cast_data_device(entry.value(), device, out_value));
  }
  return result;
}

std::vector<c10::IValue> cast_elements(c10::ArrayRef<c10::IValue> data, at::Device device,
                                       const std::optional<c10::IValue>& out) {
  std::vector<c10::IValue> result;
  for (size_t i = 0; i < data.size(); ++i) {
    std::optional<c10::IValue> out_value;
    if (out) out_value = elements_of(*out)[i];
    result.push_back(cast_data_device(data[i], device, out_value));
  }
  return result;
}

c10::IValue as_ivalue(const std::map<std::string, at::Tensor>& data) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [key, tensor] : data) dict.insert(key, tensor);
  return dict;
}

}  // namespace

at::Device get_data_device(const c10::IValue& data) {
  require_data("get_data_device", data);
  if (data.isTensor()) return data.toTensor().device();
  require_nonempty("get_data_device", data);
  std::optional<at::Device> seen;
  auto visit = [&seen](const c10::IValue& value) {
    const at::Device device = get_data_device(value);
    if (seen && *seen != device) {
      refuse("get_data_device: the tensors in data are on different devices, " + seen->str() +
             " and " + device.str() + "; cast_data_device them to one device first");
    }
    seen = device;
  };
  if (data.isGenericDict()) {
    for (const auto& entry : data.toGenericDict()) visit(entry.value());
  } else {
    for (const auto& value : elements_of(data)) visit(value);
  }
  return *seen;
}

at::Device get_data_device(const at::Tensor& data) { return data.device(); }

at::Device get_data_device(const std::vector<at::Tensor>& data) {
  return get_data_device(c10::IValue(c10::List<at::Tensor>(data)));
}

at::Device get_data_device(const std::map<std::string, at::Tensor>& data) {
  return get_data_device(as_ivalue(data));
}

c10::IValue cast_data_device(const c10::IValue& data, at::Device device,
                             const std::optional<c10::IValue>& out) {
  require_data("cast_data_device", data);
  if (out) require_same_shape(data, *out);
  if (data.isTensor()) {
    const at::Tensor& tensor = data.toTensor();
    at::Tensor moved = tensor.device() == device ? tensor : tensor.to(device);
    if (out) out->toTensor().copy_(moved);
    return moved;
  }
  require_nonempty("cast_data_device", data);
  if (data.isGenericDict()) return cast_dict(data.toGenericDict(), device, out);
  std::vector<c10::IValue> values = cast_elements(elements_of(data), device, out);
  if (data.isTuple()) return c10::ivalue::Tuple::create(std::move(values));
  c10::impl::GenericList result(data.toList().elementType());
  for (auto& value : values) result.push_back(std::move(value));
  return result;
}

at::Tensor cast_data_device(const at::Tensor& data, at::Device device,
                            const std::optional<at::Tensor>& out) {
  std::optional<c10::IValue> out_value;
  if (out) out_value = *out;
  return cast_data_device(c10::IValue(data), device, out_value).toTensor();
}

std::vector<at::Tensor> cast_data_device(const std::vector<at::Tensor>& data, at::Device device,
                                         const std::optional<std::vector<at::Tensor>>& out) {
  std::optional<c10::IValue> out_value;
  if (out) out_value = c10::IValue(c10::List<at::Tensor>(*out));
  return cast_data_device(c10::IValue(c10::List<at::Tensor>(data)), device, out_value)
      .toTensorVector();
}

std::map<std::string, at::Tensor> cast_data_device(
    const std::map<std::string, at::Tensor>& data, at::Device device,
    const std::optional<std::map<std::string, at::Tensor>>& out) {
  std::optional<c10::IValue> out_value;
  if (out) out_value = as_ivalue(*out);
  std::map<std::string, at::Tensor> result;
  for (const auto& entry : cast_data_device(as_ivalue(data), device, out_value).toGenericDict()) {
    result.emplace(entry.key().toStringRef(), entry.value().toTensor());
  }
  return result;
}

}  // namespace engine::device
