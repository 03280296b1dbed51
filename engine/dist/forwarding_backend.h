#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/dist/backend.h"
#include "engine/dist/call.h"

namespace engine::dist {

// A Backend that hands every call to `inner`: the base of wrappers that act
// around each call (the flight recorder, the debug mode's checks), which
// override around() and split() instead of every method. rank(), size(),
// name(), comm_device(), node_shared_wait() and transport() are inner's.
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  at::Device comm_device() const override { return inner_->comm_device(); }
  std::optional<std::chrono::milliseconds> node_shared_wait() const override {
    return inner_->node_shared_wait();
  }
  const Backend& transport() const override { return inner_->transport(); }

#define ENGINE_DIST_OVERRIDE_CALL(name, parameters, ...) WorkPtr name parameters override;
  ENGINE_DIST_BACKEND_CALLS(ENGINE_DIST_OVERRIDE_CALL)
  ENGINE_DIST_BACKEND_CALL_FORMS(ENGINE_DIST_OVERRIDE_CALL)
#undef ENGINE_DIST_OVERRIDE_CALL

 protected:
  // Runs `start`, which makes the call on inner, and returns its Work (or
  // one that wraps it). The default only runs it.
  virtual WorkPtr around(const Call& call, const std::function<WorkPtr()>& start) {
    return start();
  }

  Backend& inner() const { return *inner_; }

 private:
  std::shared_ptr<Backend> inner_;
};

}  // namespace engine::dist
