#include "engine/checkpoint/deferred_saves.h"

#include <ATen/core/grad_mode.h>

#include <stdexcept>
#include <utility>

#include "engine/checkpoint/file.h"
#include "engine/dist/helpers.h"

namespace engine::checkpoint {
namespace {

// The capture of this thread, if any. Per thread: the simulator's ranks are
// threads of one process, each saving its own part.
thread_local DeferredSaves* capturing_thread = nullptr;

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
  // grad would keep its graph alive until the write.
  at::NoGradGuard no_grad;
  capturing_thread->saves_.push_back({path, content.deepcopy(), &fs});
  return true;
}

std::future<std::string> DeferredSaves::write_in_background() {
  end_capture();
  return std::async(std::launch::async, [saves = std::move(saves_)] {
    for (const Save& save : saves) {
      std::string failure = dist::failure_of([&] { save_file(save.path, save.content, *save.fs); });
      if (!failure.empty()) return failure;
    }
    return std::string();
  });
}

}  // namespace engine::checkpoint
