#include "engine/dist/debug_mode.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/tensor.h>

#include <array>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "engine/dist/call.h"
#include "engine/dist/errors.h"
#include "engine/dist/forwarding_backend.h"

namespace engine::dist {
namespace {

// Every kind a Call can have, as the fingerprint numbers it.
#define ENGINE_DIST_KIND_OF(name, ...) #name,
constexpr std::array kKinds = {ENGINE_DIST_BACKEND_CALLS(ENGINE_DIST_KIND_OF) "new_group"};
#undef ENGINE_DIST_KIND_OF
constexpr int kMaxDims = 6;

int kind_index(const char* kind) {
  for (size_t i = 0; i < kKinds.size(); ++i) {
    if (std::strcmp(kKinds[i], kind) == 0) return static_cast<int>(i);
  }
  throw std::logic_error(std::string("debug check: no fingerprint for the call kind ") + kind);
}

// A signature as numbers: [kind, seq, dtype, op, root, ndim, dims..., ranks
// hash]; the peer is left out, as point-to-point calls are not checked.
using Fingerprint = std::array<int64_t, 7 + kMaxDims>;

Fingerprint fingerprint(const CallSignature& call) {
  Fingerprint f{};
  f[0] = kind_index(call.kind);
  f[1] = static_cast<int64_t>(call.seq);
  const bool has_tensor = call.dtype != c10::ScalarType::Undefined;
  f[2] = has_tensor ? static_cast<int64_t>(call.dtype) : -1;
  f[3] = call.op ? static_cast<int64_t>(*call.op) : -1;
  f[4] = call.root;
  f[5] = has_tensor ? static_cast<int64_t>(call.shape.size()) : -1;
  for (size_t d = 0; has_tensor && d < call.shape.size(); ++d) {
    // Dimensions past kMaxDims fold into the last slot.
    const size_t slot = 6 + std::min<size_t>(d, kMaxDims - 1);
    f[slot] = f[slot] * 1000003 + call.shape[d];
  }
  std::string members;
  for (const int r : call.ranks) members += std::to_string(r) + ",";
  f[6 + kMaxDims] = static_cast<int64_t>(std::hash<std::string>{}(members));
  return f;
}

// The signature back, as far as the numbers keep it (no ranks; folded
// dimensions as folded).
CallSignature signature_of(const Fingerprint& f) {
  CallSignature call;
  call.kind = kKinds.at(f[0]);
  call.seq = static_cast<uint64_t>(f[1]);
  if (f[2] >= 0) {
    call.dtype = static_cast<c10::ScalarType>(f[2]);
    call.shape.assign(f.begin() + 6, f.begin() + 6 + std::min<int64_t>(f[5], kMaxDims));
  }
  if (f[3] >= 0) call.op = static_cast<ReduceOp>(f[3]);
  call.root = static_cast<int>(f[4]);
  return call;
}

class DebugModeBackend : public ForwardingBackend {
 public:
  explicit DebugModeBackend(std::shared_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}

  // Every all_reduce goes through around(), never through node-shared buffers.
  std::optional<std::chrono::milliseconds> node_shared_wait() const override {
    return std::nullopt;
  }

  std::shared_ptr<Backend> split(const std::vector<int>& ranks) override {
    CallSignature call;
    call.kind = "new_group";
    call.seq = ++seq_;
    call.ranks = ranks;
    check(call);
    auto group = inner().split(ranks);
    return group ? with_call_checks(std::move(group)) : nullptr;
  }

 protected:
  // Point-to-point calls are not checked: only two ranks take part.
  WorkPtr around(const Call& call, const std::function<WorkPtr()>& start) override {
    if (!call.point_to_point()) check(CallSignature::of(call, ++seq_));
    return start();
  }

 private:
  // All-gathers this call's fingerprint; throws on every rank if any differs.
  void check(const CallSignature& call) {
    const Fingerprint mine = fingerprint(call);
    const at::Tensor packed = at::tensor(at::ArrayRef<int64_t>(mine.data(), mine.size()), at::kLong)
                                  .to(inner().comm_device());
    at::Tensor all = packed.new_empty({size(), packed.numel()});
    inner().all_gather_into_tensor(all, packed)->wait();
    all = all.cpu();
    if (all.eq(all[0]).all().item<bool>()) return;
    std::string message = "debug check: ranks called different collectives on this group:";
    for (int r = 0; r < size(); ++r) {
      Fingerprint f;
      std::memcpy(f.data(), all[r].data_ptr(), sizeof(f));
      message += "\n  group rank " + std::to_string(r) + ": " + signature_of(f).describe();
    }
    throw CollectiveMismatch(
        on_rank(rank(), message + "\nMake every rank of the group issue the same "
                                  "collectives (kind, dtype, shape, op, root) in order"));
  }

  int64_t seq_ = 0;
};

}  // namespace

std::shared_ptr<Backend> with_call_checks(std::shared_ptr<Backend> inner) {
  return std::make_shared<DebugModeBackend>(std::move(inner));
}

}  // namespace engine::dist
