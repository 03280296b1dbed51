#include "engine/dist/debug_mode.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/tensor.h>

#include <array>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "engine/dist/describe.h"
#include "engine/dist/errors.h"
#include "engine/dist/forwarding_backend.h"

namespace engine::dist {
namespace {

const std::array<const char*, 10> kKinds = {
    "all_reduce", "broadcast",      "reduce",     "all_gather", "gather",
    "scatter",    "reduce_scatter", "all_to_all", "barrier",    "new_group"};
constexpr int kMaxDims = 6;

// One call as numbers: [kind, seq, dtype, op, root, ndim, dims..., ranks hash].
using Fingerprint = std::array<int64_t, 7 + kMaxDims>;

Fingerprint fingerprint(int kind, int64_t seq, const at::Tensor& like, int op, int root,
                        const std::vector<int>& ranks = {}) {
  Fingerprint f{};
  f[0] = kind;
  f[1] = seq;
  f[2] = like.defined() ? static_cast<int64_t>(like.scalar_type()) : -1;
  f[3] = op;
  f[4] = root;
  f[5] = like.defined() ? like.dim() : -1;
  for (int d = 0; like.defined() && d < like.dim(); ++d) {
    // Dimensions past kMaxDims fold into the last slot.
    f[6 + std::min(d, kMaxDims - 1)] = f[6 + std::min(d, kMaxDims - 1)] * 1000003 + like.size(d);
  }
  std::string members;
  for (const int r : ranks) members += std::to_string(r) + ",";
  f[6 + kMaxDims] = static_cast<int64_t>(std::hash<std::string>{}(members));
  return f;
}

std::string describe_fingerprint(const Fingerprint& f) {
  std::string out = std::string(kKinds.at(f[0])) + " #" + std::to_string(f[1]) + " (";
  if (f[3] >= 0) out += std::string(reduce_op_name(static_cast<ReduceOp>(f[3]))) + ", ";
  if (f[4] >= 0) out += "root " + std::to_string(f[4]) + ", ";
  if (f[2] >= 0) {
    std::vector<int64_t> shape(f.begin() + 6, f.begin() + 6 + std::min<int64_t>(f[5], kMaxDims));
    out += std::string(c10::toString(static_cast<c10::ScalarType>(f[2]))) +
           engine::dist::describe(shape);
  }
  if (out.back() == ' ') out.resize(out.size() - 2);
  return out + ")";
}

int kind_index(const char* kind) {
  for (size_t i = 0; i < kKinds.size(); ++i) {
    if (std::strcmp(kKinds[i], kind) == 0) return static_cast<int>(i);
  }
  throw std::logic_error(std::string("debug check: no fingerprint for the call kind ") + kind);
}

class DebugModeBackend : public ForwardingBackend {
 public:
  explicit DebugModeBackend(std::shared_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}

  // Every all_reduce goes through around(), never through node-shared buffers.
  std::optional<std::chrono::milliseconds> node_shared_wait() const override {
    return std::nullopt;
  }

  std::shared_ptr<Backend> split(const std::vector<int>& ranks) override {
    check(kind_index("new_group"), at::Tensor(), -1, -1, ranks);
    auto group = inner().split(ranks);
    return group ? with_call_checks(std::move(group)) : nullptr;
  }

 protected:
  // Point-to-point calls are not checked: only two ranks take part.
  WorkPtr around(const Call& call, const std::function<WorkPtr()>& start) override {
    if (!call.point_to_point())
      check(kind_index(call.kind), *call.like, call.op ? static_cast<int>(*call.op) : -1,
            call.root);
    return start();
  }

 private:
  // All-gathers this call's fingerprint; throws on every rank if any differs.
  void check(int kind, const at::Tensor& like, int op, int root,
             const std::vector<int>& ranks = {}) {
    const Fingerprint mine = fingerprint(kind, ++seq_, like, op, root, ranks);
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
      message += "\n  group rank " + std::to_string(r) + ": " + describe_fingerprint(f);
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
