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

  WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) override;
  WorkPtr broadcast(at::Tensor& tensor, int root) override;
  WorkPtr reduce(at::Tensor& tensor, int root, ReduceOp op) override;
  WorkPtr all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input) override;
  WorkPtr all_gather_into_tensor(at::Tensor& output, const at::Tensor& input) override;
  WorkPtr gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) override;
  WorkPtr scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) override;
  WorkPtr reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                         ReduceOp op) override;
  WorkPtr reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  WorkPtr all_to_all(std::vector<at::Tensor>& outputs,
                     const std::vector<at::Tensor>& inputs) override;
  WorkPtr barrier() override;
  WorkPtr send(const at::Tensor& tensor, int dst, int tag) override;
  WorkPtr recv(at::Tensor& tensor, int src, int tag) override;

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
