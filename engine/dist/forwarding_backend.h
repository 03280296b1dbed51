#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/dist/backend.h"

namespace engine::dist {

// What a wrapper sees of one call before it starts.
struct Call {
  // "all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter",
  // "reduce_scatter", "all_to_all", "barrier", "send" or "recv" (and
  // "new_group" where a wrapper describes split() the same way). Both forms
  // of all_gather and of reduce_scatter share a kind.
  const char* kind;
  // The tensor whose dtype and shape describe the call: the one reduced or
  // moved, the input of all_gather and gather, the output of scatter and
  // reduce_scatter, the first input of all_to_all; undefined for barrier
  // and for an all_to_all without inputs.
  const at::Tensor* like;
  std::optional<ReduceOp> op;  // reductions only
  int root = -1;               // broadcast, reduce, gather, scatter: a group rank
  int peer = -1;               // send, recv: a group rank
  bool point_to_point() const { return peer >= 0; }
};

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
