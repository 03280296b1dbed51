#include "engine/device/device.h"

#include <ATen/Context.h>

namespace engine::device {

bool is_cuda_available() { return at::hasCUDA(); }

std::string get_device() { return is_cuda_available() ? "cuda" : "cpu"; }

}  // namespace engine::device
