#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/dist/group.h"
#include "engine/dist/work.h"

// DDP communication hooks (PyTorch's register_comm_hook): what the reducer
// does with a bucket of gradients once every gradient in it is ready.
namespace engine::model {

// One bucket as the reducer hands it to a hook. `buffer` holds this rank's
// gradients, flattened, not yet divided by the group size; `gradients` are
// views into it, shaped like `parameters`. The hook may write into all
// three of buffer, gradients and its own tensors.
struct GradBucket {
  size_t index = 0;
  bool is_last = false;  // the last bucket of this backward
  at::Tensor buffer;
  std::vector<at::Tensor> gradients;
  std::vector<at::Tensor> parameters;
  std::vector<size_t> parameter_indices;  // positions in the reducer's list
};

// What a hook started. Once `work` waited successfully, `result` (as many
// elements as the bucket's buffer) holds the bucket's reduced gradients,
// which replace the buffer; `result` may be the buffer itself.
struct HookWork {
  dist::WorkPtr work;
  at::Tensor result;
};

// Per-rank state a hook carries across steps, by name, as checkpoints save
// it: every rank's tensors under one name have the same shape and dtype.
using HookState = c10::Dict<std::string, at::Tensor>;

// A hook is registered on one wrapper and called by its reducer on the
// backward thread, one bucket at a time in launch order, the same buckets
// on every rank of the group. Every rank must register an equal hook (the
// same type and settings), before the first backward.
class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual HookWork run(GradBucket& bucket, const dist::GroupPtr& group) = 0;
  // The type and settings, as the registration check compares them across
  // ranks and messages print them.
  virtual std::string describe() const = 0;
  // This rank's state to checkpoint; empty for a hook that keeps none.
  virtual HookState state() const { return HookState(); }
  // Puts back what state() returned (after a restart at the same world size
  // and bucket layout). InvalidArgument when `saved` does not fit the hook.
  virtual void load_state(const HookState& saved);
};

using CommHookPtr = std::shared_ptr<CommHook>;

// PyTorch's default hooks. allreduce: the buffer divided by the group size,
// then summed; bit for bit what the reducer does without a hook.
// fp16_compress / bf16_compress: the buffer divided by the group size
// (before the sum, so the sum cannot overflow: pytorch#57410), cast to
// float16 / bfloat16, summed in that dtype and cast back.
CommHookPtr allreduce_hook();
CommHookPtr fp16_compress_hook();
CommHookPtr bf16_compress_hook();

}  // namespace engine::model
