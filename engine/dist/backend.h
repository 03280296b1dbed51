#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/dist/reduce_op.h"
#include "engine/dist/work.h"

namespace engine::dist {

// What every backend (simulator, MPI, Gloo, NCCL) promises.
//
// Ranks and roots here are ranks *within this backend's group*, 0..size()-1;
// the dist layer maps global ranks to them.
//
// Order: every rank of the group issues the same collectives in the same
// order. A backend that can check this (the simulator always; real backends in
// debug mode) raises CollectiveMismatch on every rank instead of hanging.
//
// Tensors: the dist layer hands over dense, contiguous tensors of one dtype
// and device; lists hold size() tensors of one shape unless a method says
// otherwise. The caller leaves the tensors untouched until the returned Work
// completed, and the Work holds them (keeps them alive) until then, as
// c10d's works do: the dist layer hands over the caller's own tensors
// without holding them itself.
//
// In place: all_reduce and broadcast write `tensor` (broadcast only on
// non-roots); reduce writes `tensor` on the root only and leaves the other
// ranks' tensors as they were; the output arguments of the others are written
// on the ranks that receive (gather: root only).
//
// Errors: argument errors throw InvalidArgument at the call. Failures of the
// operation (mismatch, timeout, a failed peer) come from Work::wait.
//
// Threads: one thread per rank at a time calls a backend; calls from several
// threads of one rank must be serialized by the caller.
//
// A backend implements the operations it supports; the others throw
// InvalidArgument at the call, naming the backend and the operation.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;
  // The device this backend's tensors live on (mmengine's get_comm_device):
  // the CPU, or the rank's CUDA device for NCCL. The dist layer's own
  // tensors (object frames, helper counts) are made there.
  virtual at::Device comm_device() const { return at::kCPU; }
  // How long a rank of this group waits for its peers in an all_reduce on
  // node-shared buffers (engine/dist/node_shared.h); nullopt when this
  // backend's groups keep to their own buffers: the default, for a backend
  // that must see every collective (the simulator, the debug mode) or whose
  // tensors are not in CPU memory.
  virtual std::optional<std::chrono::milliseconds> node_shared_wait() const { return std::nullopt; }
  // The backend that moves the data: this one; for a wrapper
  // (ForwardingBackend), its inner backend's transport().
  virtual const Backend& transport() const { return *this; }

  virtual WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op);
  virtual WorkPtr broadcast(at::Tensor& tensor, int root);
  virtual WorkPtr reduce(at::Tensor& tensor, int root, ReduceOp op);
  // outputs[r] receives rank r's input.
  virtual WorkPtr all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input);
  // all_gather into one tensor (c10d's _allgather_base): `output` is
  // contiguous, of input's dtype, with size() * input.numel() elements, and
  // its r-th block receives rank r's input. A backend that moves one buffer
  // overrides it to skip the per-rank views; this default goes through
  // all_gather on views of `output`.
  virtual WorkPtr all_gather_into_tensor(at::Tensor& output, const at::Tensor& input);
  // Like all_gather, but only the root's `outputs` are written; elsewhere they
  // are ignored (may be empty).
  virtual WorkPtr gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, int root);
  // Rank r's output receives the root's inputs[r]; `inputs` matter on the root only.
  virtual WorkPtr scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root);
  // Rank r's output = reduction over all ranks of their inputs[r]. `output`
  // may be one of `inputs`; the inputs count as they were before the call.
  virtual WorkPtr reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                 ReduceOp op);
  // reduce_scatter from one tensor (c10d's _reduce_scatter_base): `input` is
  // contiguous, of output's dtype, with size() * output.numel() elements, and
  // rank r's output = reduction over all ranks of their input's r-th block.
  // `output` may lie inside `input` (NCCL's in-place call puts it at block r).
  // A backend that moves one buffer overrides it to skip the per-rank views
  // and the packing copy; this default goes through reduce_scatter on views.
  virtual WorkPtr reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input, ReduceOp op);
  // Rank r's outputs[s] receives rank s's inputs[r]. All tensors share one shape.
  virtual WorkPtr all_to_all(std::vector<at::Tensor>& outputs,
                             const std::vector<at::Tensor>& inputs);
  virtual WorkPtr barrier();
  // Point to point. A send matches the recv with the same (src, dst, tag),
  // in order; so on the simulator, mpi and gloo. nccl has no tags: its
  // send matches the next recv between the same two ranks, whatever the
  // tags, as PyTorch's NCCL process group does.
  virtual WorkPtr send(const at::Tensor& tensor, int dst, int tag);
  virtual WorkPtr recv(at::Tensor& tensor, int src, int tag);

  // Collective over this group: every rank calls it with the same sorted,
  // distinct `ranks` (ranks of this group). Returns the new group's backend on
  // its members and nullptr elsewhere.
  virtual std::shared_ptr<Backend> split(const std::vector<int>& ranks) = 0;
};

}  // namespace engine::dist
