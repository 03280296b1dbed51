#include "engine/dist/pickle.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/dist/pickle_bounds.h"

namespace engine::dist {
namespace {

// LibTorch 1.13's pickler keeps a process-wide type cache (a static
// unordered_map filled while unpickling) without a lock: ThreadSanitizer sees
// two threads unpickling race on it. Ranks that share a process (the
// simulator, or a trainer's helper threads) take turns here.
std::mutex& pickler_mutex() {
  static std::mutex mutex;
  return mutex;
}

bool spans_its_storage(const at::Tensor& t) {
  return t.storage_offset() == 0 && t.nbytes() == t.storage().nbytes();
}

// What pickling gives back, minus what the format or LibTorch 2.x cannot
// carry:
// - The pickler writes a tensor's whole storage (as torch.save does), so a
//   contiguous view of part of one travels as a copy of its own elements.
// - An empty view may start past the end of its storage (a slice of an
//   empty tensor at offset 1), which LibTorch 2.x's unpickler refuses
//   ("storage offset 1 is out of bounds for storage of size 0"): an empty
//   view travels as an empty tensor of the same shape, strides and dtype at
//   offset 0, which holds the same (no) values.
// Every other value is kept as it is.
c10::IValue loadable(const c10::IValue& value) {
  return map_tensors(value, [](const at::Tensor& t) {
    if (!t.defined() || !t.has_storage() || spans_its_storage(t)) return t;
    if (t.numel() == 0) {
      return at::empty_strided(t.sizes(), t.strides(), t.options())
          .requires_grad_(t.requires_grad());
    }
    return t.is_contiguous() ? t.detach().clone().requires_grad_(t.requires_grad()) : t;
  });
}

using TensorMemo = std::unordered_map<const c10::TensorImpl*, at::Tensor>;

c10::IValue map_tensors_memoized(const c10::IValue& value,
                                 const std::function<at::Tensor(const at::Tensor&)>& map,
                                 TensorMemo& memo) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    auto [it, inserted] = memo.try_emplace(tensor.unsafeGetTensorImpl());
    if (inserted) it->second = map(tensor);
    return it->second;
  }
  const auto mapped = [&](const c10::IValue& element) {
    return map_tensors_memoized(element, map, memo);
  };
  if (value.isList()) {
    c10::impl::GenericList out(value.toList().elementType());
    for (const c10::IValue& element : value.toListRef()) out.push_back(mapped(element));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      elements.push_back(mapped(element));
    }
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (value.isGenericDict()) {
    const c10::impl::GenericDict dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) out.insert(entry.key(), mapped(entry.value()));
    return out;
  }
  return value;
}

// torch::jit::pickle_save's archive, from a pickler whose aggregates carry
// no type tags.
std::vector<char> save_untagged(const c10::IValue& value) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* data, size_t size) { pickled.insert(pickled.end(), data, data + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  // Reserved for the tensors' bytes and the zip's records (their headers
  // and alignment), so that a large archive is not copied as it grows.
  constexpr size_t kPerRecord = 256;
  size_t expected = pickled.size() + (pickler.tensorData().size() + 4) * kPerRecord;
  for (const at::Tensor& tensor : pickler.tensorData()) expected += tensor.nbytes();
  std::vector<char> archive;
  archive.reserve(expected);
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      const auto* bytes = static_cast<const char*>(data);
      archive.insert(archive.end(), bytes, bytes + size);
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(),
                                       writer);
  }  // the writer's destructor writes the archive's end
  return archive;
}

}  // namespace

c10::IValue map_tensors(const c10::IValue& value,
                        const std::function<at::Tensor(const at::Tensor&)>& map) {
  TensorMemo memo;
  return map_tensors_memoized(value, map, memo);
}

at::Tensor pickle(const c10::IValue& value) {
  const c10::IValue saved = loadable(value);
  std::lock_guard<std::mutex> lock(pickler_mutex());
  return adopt_bytes(torch::jit::pickle_save(saved));
}

at::Tensor pickle_untagged(const c10::IValue& value) {
  const c10::IValue saved = loadable(value);
  std::lock_guard<std::mutex> lock(pickler_mutex());
  return adopt_bytes(save_untagged(saved));
}

at::Tensor adopt_bytes(std::vector<char>&& bytes) {
  auto* owned = new std::vector<char>(std::move(bytes));
  return at::from_blob(
      owned->data(), {static_cast<int64_t>(owned->size())}, [owned](void*) { delete owned; },
      at::TensorOptions().dtype(at::kByte));
}

c10::IValue unpickle(const at::Tensor& bytes, const std::string& what) {
  const at::Tensor flat = bytes.contiguous();
  const char* begin = static_cast<const char*>(flat.data_ptr());
  check_pickle_archive(std::string_view(begin, static_cast<size_t>(flat.numel())), what);
  try {
    std::lock_guard<std::mutex> lock(pickler_mutex());
    return torch::jit::pickle_load(std::vector<char>(begin, begin + flat.numel()));
  } catch (const std::exception& e) {
    throw MalformedInput(what + " is not a valid pickle (" + std::to_string(flat.numel()) +
                         " bytes): " + e.what());
  }
}

}  // namespace engine::dist
