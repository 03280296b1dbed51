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

// Every call a Backend takes, listed once for the code that treats them all
// alike: Backend's declarations and default bodies, ForwardingBackend's
// overrides, the debug mode's kinds. A new collective is an entry here, its
// API (collectives.h) and the simulator's implementation; a real backend
// overrides it when it implements it.
//
// X(name, parameters, arguments, description): `description` is what a
// Call (call.h) holds after its kind, which is `name`.
//
// - all_reduce, broadcast: in place (broadcast writes non-roots only).
// - reduce: writes `tensor` on the root only; the others keep theirs.
// - all_gather: outputs[r] receives rank r's input.
// - gather: like all_gather, but only the root's `outputs` are written;
//   elsewhere they are ignored (may be empty).
// - scatter: rank r's output receives the root's inputs[r]; `inputs` matter
//   on the root only.
// - reduce_scatter: rank r's output = reduction over all ranks of their
//   inputs[r]. `output` may be one of `inputs`; the inputs count as they were
//   before the call.
// - all_to_all: rank r's outputs[s] receives rank s's inputs[r]. All tensors
//   share one shape.
// - send, recv: a send matches the recv with the same (src, dst, tag), in
//   order; so on the simulator, mpi and gloo. nccl has no tags: its send
//   matches the next recv between the same two ranks, whatever the tags, as
//   PyTorch's NCCL process group does.
#define ENGINE_DIST_BACKEND_CALLS(X)                                                               \
  X(all_reduce, (at::Tensor & tensor, ReduceOp op), (tensor, op), (&tensor, op))                   \
  X(broadcast, (at::Tensor & tensor, int root), (tensor, root), (&tensor, std::nullopt, root))     \
  X(reduce, (at::Tensor & tensor, int root, ReduceOp op), (tensor, root, op), (&tensor, op, root)) \
  X(all_gather, (std::vector<at::Tensor> & outputs, const at::Tensor& input), (outputs, input),    \
    (&input))                                                                                      \
  X(gather, (std::vector<at::Tensor> & outputs, const at::Tensor& input, int root),                \
    (outputs, input, root), (&input, std::nullopt, root))                                          \
  X(scatter, (at::Tensor & output, const std::vector<at::Tensor>& inputs, int root),               \
    (output, inputs, root), (&output, std::nullopt, root))                                         \
  X(reduce_scatter, (at::Tensor & output, const std::vector<at::Tensor>& inputs, ReduceOp op),     \
    (output, inputs, op), (&output, op))                                                           \
  X(all_to_all, (std::vector<at::Tensor> & outputs, const std::vector<at::Tensor>& inputs),        \
    (outputs, inputs), (inputs.empty() ? &no_tensor() : &inputs[0]))                               \
  X(barrier, (), (), (&no_tensor()))                                                               \
  X(send, (const at::Tensor& tensor, int dst, int tag), (tensor, dst, tag),                        \
    (&tensor, std::nullopt, -1, dst))                                                              \
  X(recv, (at::Tensor & tensor, int src, int tag), (tensor, src, tag),                             \
    (&tensor, std::nullopt, -1, src))

// The one-tensor forms of two calls above, whose default bodies go through
// the list forms on views, and whose Call is the list form's (`kind`).
// X(name, parameters, arguments, description, kind).
//
// - all_gather_into_tensor (c10d's _allgather_base): `output` is contiguous,
//   of input's dtype, with size() * input.numel() elements, and its r-th
//   block receives rank r's input. A backend that moves one buffer overrides
//   it to skip the per-rank views.
// - reduce_scatter_tensor (c10d's _reduce_scatter_base): `input` is
//   contiguous, of output's dtype, with size() * output.numel() elements, and
//   rank r's output = reduction over all ranks of their input's r-th block.
//   `output` may lie inside `input` (NCCL's in-place call puts it at block
//   r). A backend that moves one buffer overrides it to skip the per-rank
//   views and the packing copy.
#define ENGINE_DIST_BACKEND_CALL_FORMS(X)                                                    \
  X(all_gather_into_tensor, (at::Tensor & output, const at::Tensor& input), (output, input), \
    (&input), all_gather)                                                                    \
  X(reduce_scatter_tensor, (at::Tensor & output, const at::Tensor& input, ReduceOp op),      \
    (output, input, op), (&output, op), reduce_scatter)

// The parentheses around a list of macro arguments, removed.
#define ENGINE_DIST_UNPARENTHESIZED(...) __VA_ARGS__

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
// Outputs: each call's are written on the ranks that receive (above).
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

  // Every call in ENGINE_DIST_BACKEND_CALLS and ENGINE_DIST_BACKEND_CALL_FORMS
  // (above), declared virtual.
#define ENGINE_DIST_DECLARE_CALL(name, parameters, ...) virtual WorkPtr name parameters;
  ENGINE_DIST_BACKEND_CALLS(ENGINE_DIST_DECLARE_CALL)
  ENGINE_DIST_BACKEND_CALL_FORMS(ENGINE_DIST_DECLARE_CALL)
#undef ENGINE_DIST_DECLARE_CALL

  // Collective over this group: every rank calls it with the same sorted,
  // distinct `ranks` (ranks of this group). Returns the new group's backend on
  // its members and nullptr elsewhere.
  virtual std::shared_ptr<Backend> split(const std::vector<int>& ranks) = 0;
};

}  // namespace engine::dist
