#include "engine/model/comm_hooks/comm_hook.h"

#include <ATen/ops/div.h>

#include "engine/dist/collectives.h"
#include "engine/dist/errors.h"

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
  CompressHook(at::ScalarType wire, std::string name) : wire_(wire), name_(std::move(name)) {}

  HookWork run(GradBucket& bucket, const dist::GroupPtr& group) override {
    at::Tensor compressed = bucket.buffer.to(wire_).div_(group->size());
    at::Tensor buffer = bucket.buffer;
    dist::WorkPtr sum = dist::all_reduce_async(compressed, "sum", group);
    return {dist::then(sum, [buffer, compressed]() mutable { buffer.copy_(compressed); }), buffer};
  }
  std::string describe() const override { return name_; }

 private:
  at::ScalarType wire_;
  std::string name_;
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
