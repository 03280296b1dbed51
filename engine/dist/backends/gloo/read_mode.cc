#include "engine/dist/backends/gloo/read_mode.h"

#include <utility>

namespace engine::dist::gloo {

ReadMode::ReadMode(bool may_spin, SetSpinning set_spinning)
    : may_spin_(may_spin), set_spinning_(std::move(set_spinning)) {
  set_spinning_(false);
}

ReadMode::Waiting::Waiting(ReadMode& mode) : mode_(mode) {
  mode_.waiting_.fetch_add(1, std::memory_order_relaxed);
}

ReadMode::Waiting::~Waiting() { mode_.waiting_.fetch_sub(1, std::memory_order_relaxed); }

void ReadMode::refresh() {
  const bool spin = may_spin_ && waiting_.load(std::memory_order_relaxed) > 0;
  if (spin == spinning_) return;
  spinning_ = spin;
  set_spinning_(spin);
}

}  // namespace engine::dist::gloo
