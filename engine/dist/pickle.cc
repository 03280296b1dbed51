#include "engine/dist/pickle.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <mutex>

#include "engine/dist/errors.h"

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

}  // namespace

at::Tensor pickle(const c10::IValue& value) {
  std::vector<char> bytes;
  {
    std::lock_guard<std::mutex> lock(pickler_mutex());
    bytes = torch::jit::pickle_save(value);
  }
  at::Tensor out = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

c10::IValue unpickle(const at::Tensor& bytes, const std::string& what) {
  const at::Tensor flat = bytes.contiguous();
  const char* begin = static_cast<const char*>(flat.data_ptr());
  try {
    std::lock_guard<std::mutex> lock(pickler_mutex());
    return torch::jit::pickle_load(std::vector<char>(begin, begin + flat.numel()));
  } catch (const std::exception& e) {
    throw DistError(what + " is not a valid pickle (" + std::to_string(flat.numel()) +
                    " bytes): " + e.what());
  }
}

}  // namespace engine::dist
