#include "engine/dist/checked_backend.h"

#include <ATen/ATen.h>

#include <array>
#include <cstring>
#include <functional>

#include "engine/dist/describe.h"
#include "engine/dist/errors.h"

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

std::string describe(const Fingerprint& f) {
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

class CheckedBackend : public Backend {
 public:
  explicit CheckedBackend(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  at::Device comm_device() const override { return inner_->comm_device(); }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op) override {
    check(0, t, static_cast<int>(op), -1);
    return inner_->all_reduce(t, op);
  }
  WorkPtr broadcast(at::Tensor& t, int root) override {
    check(1, t, -1, root);
    return inner_->broadcast(t, root);
  }
  WorkPtr reduce(at::Tensor& t, int root, ReduceOp op) override {
    check(2, t, static_cast<int>(op), root);
    return inner_->reduce(t, root, op);
  }
  WorkPtr all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input) override {
    check(3, input, -1, -1);
    return inner_->all_gather(outputs, input);
  }
  WorkPtr all_gather_into_tensor(at::Tensor& output, const at::Tensor& input) override {
    check(3, input, -1, -1);
    return inner_->all_gather_into_tensor(output, input);
  }
  WorkPtr gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) override {
    check(4, input, -1, root);
    return inner_->gather(outputs, input, root);
  }
  WorkPtr scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) override {
    check(5, output, -1, root);
    return inner_->scatter(output, inputs, root);
  }
  WorkPtr reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                         ReduceOp op) override {
    check(6, output, static_cast<int>(op), -1);
    return inner_->reduce_scatter(output, inputs, op);
  }
  WorkPtr reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    check(6, output, static_cast<int>(op), -1);
    return inner_->reduce_scatter_tensor(output, input, op);
  }
  WorkPtr all_to_all(std::vector<at::Tensor>& outputs,
                     const std::vector<at::Tensor>& inputs) override {
    check(7, inputs.at(0), -1, -1);
    return inner_->all_to_all(outputs, inputs);
  }
  WorkPtr barrier() override {
    check(8, at::Tensor(), -1, -1);
    return inner_->barrier();
  }
  WorkPtr send(const at::Tensor& t, int dst, int tag) override { return inner_->send(t, dst, tag); }
  WorkPtr recv(at::Tensor& t, int src, int tag) override { return inner_->recv(t, src, tag); }
  std::shared_ptr<Backend> split(const std::vector<int>& ranks) override {
    check(9, at::Tensor(), -1, -1, ranks);
    auto group = inner_->split(ranks);
    return group ? with_call_checks(std::move(group)) : nullptr;
  }

 private:
  // All-gathers this call's fingerprint; throws on every rank if any differs.
  void check(int kind, const at::Tensor& like, int op, int root,
             const std::vector<int>& ranks = {}) {
    const Fingerprint mine = fingerprint(kind, ++seq_, like, op, root, ranks);
    const at::Tensor packed = at::tensor(at::ArrayRef<int64_t>(mine.data(), mine.size()), at::kLong)
                                  .to(inner_->comm_device());
    at::Tensor all = packed.new_empty({size(), packed.numel()});
    inner_->all_gather_into_tensor(all, packed)->wait();
    all = all.cpu();
    if (all.eq(all[0]).all().item<bool>()) return;
    std::string message = "debug check: ranks called different collectives on this group:";
    for (int r = 0; r < size(); ++r) {
      Fingerprint f;
      std::memcpy(f.data(), all[r].data_ptr(), sizeof(f));
      message += "\n  group rank " + std::to_string(r) + ": " + describe(f);
    }
    throw CollectiveMismatch(
        on_rank(rank(), message + "\nMake every rank of the group issue the same "
                                  "collectives (kind, dtype, shape, op, root) in order"));
  }

  std::shared_ptr<Backend> inner_;
  int64_t seq_ = 0;
};

}  // namespace

std::shared_ptr<Backend> with_call_checks(std::shared_ptr<Backend> inner) {
  return std::make_shared<CheckedBackend>(std::move(inner));
}

}  // namespace engine::dist
