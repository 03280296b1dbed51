#include "engine/checkpoint/deferred_saves.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint/file.h"
#include "engine/dist/pickle.h"

namespace engine::checkpoint {
namespace {

// The capture of this thread, if any. Per thread: the simulator's ranks are
// threads of one process, each saving its own part.
thread_local DeferredSaves* capturing_thread = nullptr;

// Copies of tensors on an accelerator are queued on this thread's current
// stream of their device, and the writing thread reads them on streams of
// its own: they must be done before save_file returns.
void wait_for_copies(const c10::IValue& copies) {
  std::vector<at::Device> devices;
  copies.visit([&](const c10::IValue& value) {
    if (!value.isTensor()) return false;
    const at::Device device = value.toTensor().device();
    if (!device.is_cpu() && std::find(devices.begin(), devices.end(), device) == devices.end()) {
      devices.push_back(device);
    }
    return true;
  });
  for (const at::Device& device : devices) {
    c10::impl::getDeviceGuardImpl(device.type())->getStream(device).synchronize();
  }
}

}  // namespace

DeferredSaves::DeferredSaves() {
  if (capturing_thread != nullptr) {
    throw std::logic_error("DeferredSaves: this thread's saves are already being captured");
  }
  capturing_thread = this;
}

DeferredSaves::~DeferredSaves() { end_capture(); }

void DeferredSaves::end_capture() {
  if (std::exchange(capturing_, false)) capturing_thread = nullptr;
}

bool DeferredSaves::defer(const std::string& path, const c10::IValue& content, io::FileSystem& fs) {
  if (capturing_thread == nullptr) return false;
  // A copy that autograd does not track: a clone of a tensor that requires
  // grad would keep its graph alive until the write. Each tensor is cloned
  // on its own: IValue::deepcopy takes views of one storage for one tensor
  // and would give them all the first one's copy.
  at::NoGradGuard no_grad;
  c10::IValue copies =
      dist::map_tensors(content, [](const at::Tensor& t) { return t.defined() ? t.clone() : t; });
  wait_for_copies(copies);
  capturing_thread->saves_.push_back({path, std::move(copies), &fs});
  return true;
}

std::future<std::string> DeferredSaves::write_in_background() {
  end_capture();
  return std::async(std::launch::async, [saves = std::move(saves_)] {
    for (const Save& save : saves) {
      try {
        save_file(save.path, save.content, *save.fs);
      } catch (const std::exception& error) {
        return std::string(error.what());
      }
    }
    return std::string();
  });
}

}  // namespace engine::checkpoint
