// libFuzzer target: bytes as a peer's object frame or a checkpoint's payload
// reach engine::dist::unpickle (the archive check, then LibTorch's
// unpickler). A value or MalformedInput is fine; any other exception, a
// crash, a leak or a sanitizer report is a bug.
#include <ATen/ops/from_blob.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/dist/pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  try {
    engine::dist::unpickle(
        at::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, at::kByte), "the input");
  } catch (const engine::dist::MalformedInput&) {
  }
  return 0;
}
