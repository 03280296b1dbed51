#include "engine/model/comm_hooks/powersgd.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "engine/dist/collectives.h"
#include "engine/dist/errors.h"

namespace engine::model {
namespace {

// Gram-Schmidt over the columns of `matrix` (n x r), in place.
void orthogonalize(at::Tensor& matrix, double epsilon) {
  const int64_t columns = matrix.size(1);
  for (int64_t i = 0; i < columns; ++i) {
    at::Tensor column = matrix.narrow(1, i, 1);
    at::Tensor norm = column.norm();
    column.div_(epsilon == 0 ? norm : norm.add(epsilon));
    if (i + 1 == columns) continue;
    at::Tensor rest = matrix.narrow(1, i + 1, columns - i - 1);
    rest.sub_(column.mul(rest).sum(0, /*keepdim=*/true).mul(column));
  }
}

// The bucket's gradients split as the hook treats them.
struct Split {
  std::vector<at::Tensor> matrices;  // to compress, each n x m
  std::vector<int64_t> ranks;        // r per matrix
  std::vector<at::Tensor> uncompressed;
  int64_t p_numel = 0;
  int64_t q_numel = 0;
};

class PowerSGDHook : public CommHook {
 public:
  explicit PowerSGDHook(const PowerSGDOptions& options)
      : options_(options),
        averaging_(allreduce_hook()),
        generator_(at::make_generator<at::CPUGeneratorImpl>(options.random_seed)) {}

  HookWork run(GradBucket& bucket, const dist::GroupPtr& group) override {
    const bool compress = iter_ >= options_.start_powerSGD_iter;
    if (bucket.is_last) ++iter_;
    return compress ? compress_bucket(bucket, group) : averaging_->run(bucket, group);
  }

  std::string describe() const override {
    std::ostringstream out;
    out << std::boolalpha
        << "PowerSGD(matrix_approximation_rank=" << options_.matrix_approximation_rank
        << ", start_powerSGD_iter=" << options_.start_powerSGD_iter
        << ", min_compression_rate=" << options_.min_compression_rate
        << ", use_error_feedback=" << options_.use_error_feedback
        << ", warm_start=" << options_.warm_start
        << ", orthogonalization_epsilon=" << options_.orthogonalization_epsilon
        << ", random_seed=" << options_.random_seed << ")";
    return out.str();
  }

  HookState state() const override {
    HookState saved;
    saved.insert("iter", at::scalar_tensor(iter_, at::kLong));
    {
      std::lock_guard<std::mutex> lock(generator_.mutex());
      saved.insert("rng", generator_.get_state());
    }
    for (const auto& [bucket, error] : errors_)
      saved.insert("error/" + std::to_string(bucket), error);
    for (const auto& [bucket, p] : p_memory_) saved.insert("p/" + std::to_string(bucket), p);
    for (const auto& [bucket, q] : q_memory_) saved.insert("q/" + std::to_string(bucket), q);
    return saved;
  }

  void load_state(const HookState& saved) override {
    std::map<size_t, at::Tensor> errors, ps, qs;
    for (const auto& item : saved) {
      const std::string& key = item.key();
      if (key == "iter" || key == "rng") continue;
      const size_t slash = key.find('/');
      const std::string kind = key.substr(0, slash);
      auto* target = kind == "error" ? &errors : kind == "p" ? &ps : kind == "q" ? &qs : nullptr;
      if (slash == std::string::npos || target == nullptr)
        fail_state("has the unknown entry \"" + key + "\"");
      (*target)[bucket_of(key.substr(slash + 1))] = item.value().clone();
    }
    if (!saved.contains("iter") || !saved.contains("rng")) fail_state("lacks \"iter\" or \"rng\"");
    iter_ = saved.at("iter").item<int64_t>();
    {
      std::lock_guard<std::mutex> lock(generator_.mutex());
      generator_.set_state(saved.at("rng"));
    }
    errors_ = std::move(errors);
    p_memory_ = std::move(ps);
    q_memory_ = std::move(qs);
  }

 private:
  [[noreturn]] void fail_state(const std::string& what) const {
    throw dist::InvalidArgument("the state given to " + describe() + " " + what +
                                "; was it saved by this hook?");
  }
  size_t bucket_of(const std::string& digits) const {
    if (digits.empty() || digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      fail_state("names the bucket \"" + digits + "\"");
    }
    return std::stoul(digits);
  }

  Split split(const GradBucket& bucket) const {
    Split out;
    for (const auto& gradient : bucket.gradients) {
      if (gradient.dim() == 0 || gradient.numel() == 0) {
        out.uncompressed.push_back(gradient);
        continue;
      }
      at::Tensor matrix = gradient.view({gradient.size(0), -1});
      const int64_t n = matrix.size(0), m = matrix.size(1);
      const int64_t r = std::min({n, m, options_.matrix_approximation_rank});
      if (static_cast<double>(n + m) * r * options_.min_compression_rate >=
          static_cast<double>(n * m)) {
        out.uncompressed.push_back(gradient);
        continue;
      }
      out.matrices.push_back(matrix);
      out.ranks.push_back(r);
      out.p_numel += n * r;
      out.q_numel += m * r;
    }
    return out;
  }

  // Views of `memory`, one n x r (or m x r) matrix per compressed matrix.
  static std::vector<at::Tensor> factors(const at::Tensor& memory, const Split& split, int dim) {
    std::vector<at::Tensor> out;
    int64_t offset = 0;
    for (size_t i = 0; i < split.matrices.size(); ++i) {
      const int64_t rows = split.matrices[i].size(dim), r = split.ranks[i];
      out.push_back(memory.narrow(0, offset, rows * r).view({rows, r}));
      offset += rows * r;
    }
    return out;
  }

  void add_error_feedback(GradBucket& bucket) {
    auto found = errors_.find(bucket.index);
    if (found == errors_.end()) {
      errors_[bucket.index] = at::zeros_like(bucket.buffer);
      return;
    }
    found->second = found->second.to(bucket.buffer.options());
    if (found->second.numel() != bucket.buffer.numel()) {
      fail_state("holds an error of " + std::to_string(found->second.numel()) +
                 " elements for bucket " + std::to_string(bucket.index) + ", which has " +
                 std::to_string(bucket.buffer.numel()));
    }
    bucket.buffer.add_(found->second);
  }

  // P and Q memories for the bucket; true when Q must be drawn afresh.
  bool prepare_memory(size_t index, const Split& split, const at::Tensor& like) {
    auto p = p_memory_.find(index);
    auto q = q_memory_.find(index);
    if (options_.warm_start && p != p_memory_.end() && q != q_memory_.end() &&
        p->second.numel() == split.p_numel && q->second.numel() == split.q_numel) {
      p->second = p->second.to(like.options());
      q->second = q->second.to(like.options());
      return false;
    }
    p_memory_[index] = at::empty({split.p_numel}, like.options());
    q_memory_[index] = at::empty({split.q_numel}, like.options());
    return true;
  }

  // at::randn takes the generator's lock itself.
  void draw(std::vector<at::Tensor>& qs) {
    for (auto& q : qs) {
      q.copy_(at::randn(q.sizes(), generator_, q.options().device(at::kCPU)));
      orthogonalize(q, options_.orthogonalization_epsilon);
    }
  }

  HookWork compress_bucket(GradBucket& bucket, const dist::GroupPtr& group) {
    if (options_.use_error_feedback) add_error_feedback(bucket);
    at::Tensor before = options_.use_error_feedback ? bucket.buffer.clone() : at::Tensor();
    Split parts = split(bucket);
    const size_t index = bucket.index;
    const bool fresh = prepare_memory(index, parts, bucket.buffer);
    at::Tensor p_memory = p_memory_.at(index), q_memory = q_memory_.at(index);
    std::vector<at::Tensor> ps = factors(p_memory, parts, 0), qs = factors(q_memory, parts, 1);
    if (fresh) draw(qs);
    for (size_t i = 0; i < ps.size(); ++i) at::mm_out(ps[i], parts.matrices[i], qs[i]);

    std::vector<at::Tensor> flat;
    for (const auto& tensor : parts.uncompressed) flat.push_back(tensor.reshape({-1}));
    at::Tensor uncompressed =
        flat.empty() ? at::empty({0}, bucket.buffer.options()) : at::cat(flat);
    dist::WorkPtr uncompressed_sum = dist::all_reduce_async(uncompressed, "sum", group);
    dist::WorkPtr p_sum = dist::all_reduce_async(p_memory, "sum", group);
    at::Tensor buffer = bucket.buffer;
    auto finish = [this, index, group, buffer, before, parts, ps, qs, q_memory, uncompressed,
                   uncompressed_sum]() mutable {
      uncompressed_sum->wait();
      uncompressed.div_(group->size());
      int64_t offset = 0;
      for (auto& tensor : parts.uncompressed) {
        tensor.copy_(uncompressed.narrow(0, offset, tensor.numel()).view(tensor.sizes()));
        offset += tensor.numel();
      }
      for (size_t i = 0; i < ps.size(); ++i) {
        orthogonalize(ps[i], options_.orthogonalization_epsilon);
        at::mm_out(qs[i], parts.matrices[i].t(), ps[i]);
      }
      dist::all_reduce(q_memory, "sum", group);
      q_memory.div_(group->size());
      for (size_t i = 0; i < ps.size(); ++i) at::mm_out(parts.matrices[i], ps[i], qs[i].t());
      if (options_.use_error_feedback) errors_[index] = before.sub(buffer);
      if (!options_.warm_start) {
        p_memory_.erase(index);
        q_memory_.erase(index);
      }
    };
    return {dist::then(p_sum, std::move(finish)), buffer};
  }

  PowerSGDOptions options_;
  CommHookPtr averaging_;  // the steps before start_powerSGD_iter
  mutable at::Generator generator_;
  int64_t iter_ = 0;
  std::map<size_t, at::Tensor> errors_;
  std::map<size_t, at::Tensor> p_memory_;
  std::map<size_t, at::Tensor> q_memory_;
};

}  // namespace

CommHookPtr powersgd_hook(const PowerSGDOptions& options) {
  auto refuse = [](const std::string& what) { throw dist::InvalidArgument("PowerSGD: " + what); };
  if (options.matrix_approximation_rank < 1) refuse("matrix_approximation_rank must be at least 1");
  if (options.start_powerSGD_iter < 0) refuse("start_powerSGD_iter must not be negative");
  if ((options.use_error_feedback || options.warm_start) && options.start_powerSGD_iter < 2) {
    refuse(
        "start_powerSGD_iter must be at least 2 with use_error_feedback or warm_start: the "
        "buckets are rebuilt after the first iteration, and their state is kept per bucket "
        "(pytorch#51427)");
  }
  if (!(options.min_compression_rate >= 0)) refuse("min_compression_rate must not be negative");
  if (!(options.orthogonalization_epsilon >= 0))
    refuse("orthogonalization_epsilon must not be negative");
  return std::make_shared<PowerSGDHook>(options);
}

}  // namespace engine::model
