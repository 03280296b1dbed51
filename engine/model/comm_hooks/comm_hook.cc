#include "engine/model/comm_hooks/comm_hook.h"

#include <ATen/ops/empty.h>

#include <map>

#include "engine/dist/collectives.h"
#include "engine/dist/errors.h"
#include "engine/dist/node_shared.h"

namespace engine::model {
namespace {

class AllReduceHook : public CommHook {
 public:
  HookWork run(GradBucket& bucket, const dist::GroupPtr& group) override {
    bucket.buffer.div_(group->size());
    return {dist::all_reduce_async(bucket.buffer, "sum", group), bucket.buffer};
  }
  std::string describe() const override { return "allreduce"; }
};

class CompressHook : public CommHook {
 public:
  CompressHook(at::ScalarType wire, std::string name) : wire_dtype_(wire), name_(std::move(name)) {}

  HookWork run(GradBucket& bucket, const dist::GroupPtr& group) override {
    // Divided before the cast: one rounding into the wire dtype, where
    // PyTorch's hook rounds twice (the cast, then a division in the wire
    // dtype, which LibTorch 1.13's CPU kernels also do slowly for float16).
    at::Tensor compressed = wire_buffer(bucket, group);
    compressed.copy_(bucket.buffer.div_(group->size()));
    at::Tensor buffer = bucket.buffer;
    dist::WorkPtr sum = dist::all_reduce_async(compressed, "sum", group);
    return {dist::then(sum, [buffer, compressed]() mutable { buffer.copy_(compressed); }), buffer};
  }
  std::string describe() const override { return name_; }

 private:
  // One buffer per bucket, kept across steps. On the CPU it lives where the
  // group's ranks on one machine map it, as the reducer's buckets do, so
  // that its all_reduce is a pass over shared memory.
  at::Tensor wire_buffer(const GradBucket& bucket, const dist::GroupPtr& group) {
    at::Tensor& kept = wire_[bucket.index];
    if (kept.defined() && kept.numel() == bucket.buffer.numel()) return kept;
    kept = bucket.buffer.device().is_cpu()
               ? dist::zeros_node_shared(bucket.buffer.numel(), wire_dtype_, group)
               : at::empty({bucket.buffer.numel()}, bucket.buffer.options().dtype(wire_dtype_));
    return kept;
  }

  at::ScalarType wire_dtype_;
  std::string name_;
  std::map<size_t, at::Tensor> wire_;
};

}  // namespace

void CommHook::load_state(const HookState& saved) {
  if (saved.size() != 0) {
    throw dist::InvalidArgument("the communication hook " + describe() +
                                " keeps no state, but was given " + std::to_string(saved.size()) +
                                " entries");
  }
}

CommHookPtr allreduce_hook() { return std::make_shared<AllReduceHook>(); }
CommHookPtr fp16_compress_hook() {
  return std::make_shared<CompressHook>(at::kHalf, "fp16_compress");
}
CommHookPtr bf16_compress_hook() {
  return std::make_shared<CompressHook>(at::kBFloat16, "bf16_compress");
}

}  // namespace engine::model
