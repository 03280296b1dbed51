#pragma once

// Autocast (PyTorch's torch.autocast) for one thread, behind one scope type.
// Whether autocast is on for a device is its autocast dispatch key, excluded
// or not from this thread's dispatch, in every LibTorch. Its dtype is set
// per device by name in LibTorch 1.13 (set_autocast_cpu_dtype,
// set_autocast_gpu_dtype) and with the device type as an argument in 2.x
// (set_autocast_dtype), which deprecates the old names. Which one this
// LibTorch has is read from its declarations: the fallback below is found
// only where at::autocast lacks set_autocast_dtype, because a non-template
// function wins over a template at an equal match. The old names stay
// declared (deprecated) in 2.x, and are only called where the new ones are
// missing.

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/ScalarType.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <type_traits>

namespace engine_compat_autocast_fallback {
struct Missing {};
template <typename... Args>
Missing set_autocast_dtype(Args&&...);
}  // namespace engine_compat_autocast_fallback

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
namespace engine_compat_autocast_probe {
using namespace at::autocast;
using namespace engine_compat_autocast_fallback;

template <typename Device>
constexpr bool kByDeviceType = !std::is_same_v<decltype(set_autocast_dtype(Device{}, c10::kFloat)),
                                               engine_compat_autocast_fallback::Missing>;

template <typename Device>
c10::ScalarType dtype_of(Device device) {
  if constexpr (kByDeviceType<Device>) {
    return get_autocast_dtype(device);
  } else {
    return device == Device::CPU ? at::autocast::get_autocast_cpu_dtype()
                                 : at::autocast::get_autocast_gpu_dtype();
  }
}

template <typename Device>
void set_dtype(Device device, c10::ScalarType dtype) {
  if constexpr (kByDeviceType<Device>) {
    set_autocast_dtype(device, dtype);
  } else if (device == Device::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}

}  // namespace engine_compat_autocast_probe
#pragma GCC diagnostic pop

namespace engine::compat {

// Whether autocast is on for `device` on this thread, and its dtype there.
struct AutocastState {
  bool enabled = false;
  c10::ScalarType dtype = c10::kBFloat16;
};
inline c10::DispatchKey autocast_key(c10::DeviceType device) {
  return device == c10::DeviceType::CPU ? c10::DispatchKey::AutocastCPU
                                        : c10::DispatchKey::AutocastCUDA;
}
inline AutocastState autocast_state(c10::DeviceType device) {
  return {!c10::impl::tls_is_dispatch_key_excluded(autocast_key(device)),
          engine_compat_autocast_probe::dtype_of(device)};
}

// While it lives, this thread's operators on `device` tensors run under
// autocast in `dtype` (enabled) or without autocast (!enabled); the previous
// setting comes back when it ends, and the outermost scope drops autocast's
// cache of cast weights, as torch.autocast's exit does. CPU and CUDA only.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, bool enabled, c10::ScalarType dtype = c10::kBFloat16)
      : key_(autocast_key(device)), device_(device), was_(autocast_state(device)) {
    set(enabled, enabled ? dtype : was_.dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set(was_.enabled, was_.dtype);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  void set(bool enabled, c10::ScalarType dtype) {
    c10::impl::tls_set_dispatch_key_excluded(key_, !enabled);
    engine_compat_autocast_probe::set_dtype(device_, dtype);
  }

  c10::DispatchKey key_;
  c10::DeviceType device_;
  AutocastState was_;
};

}  // namespace engine::compat
