#include "engine/dist/backends/gloo/gloo_backend.h"

#include <ATen/ATen.h>
#include <gloo/common/error.h>
#include <sched.h>
#include <torch/csrc/utils/tensor_flatten.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "engine/dist/backend_registry.h"
#include "engine/dist/backends/store/tcp_store.h"
#include "engine/dist/errors.h"

namespace engine::dist::gloo {
namespace {

c10d::ReduceOp c10d_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kProduct:
      return c10d::ReduceOp::PRODUCT;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kBand:
      return c10d::ReduceOp::BAND;
    case ReduceOp::kBor:
      return c10d::ReduceOp::BOR;
    case ReduceOp::kBxor:
      return c10d::ReduceOp::BXOR;
  }
  return c10d::ReduceOp::SUM;
}

// Bool travels as uint8, where these ops give the logical results.
ReduceOp op_for_bool(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMax:
    case ReduceOp::kBor:
      return ReduceOp::kMax;
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kBand:
      return ReduceOp::kMin;
    case ReduceOp::kBxor:
      return ReduceOp::kBxor;
  }
  return op;
}

// c10's errors carry a backtrace that says nothing to the user of a timeout.
std::string without_backtrace(const std::exception& e) {
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  return error ? error->what_without_backtrace() : e.what();
}

std::exception_ptr peer_failure(int rank, const char* what, const std::exception& e) {
  return std::make_exception_ptr(
      PeerFailure(on_rank(rank, std::string("gloo ") + what + " failed: " + e.what())));
}

// A c10d work and what to do once it succeeded.
class GlooWork : public Work {
 public:
  // `read_mode`: the pairs' mode, for a call of the adapter's own pairs (else null).
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::function<void()> on_success, const char* what,
           int rank, std::chrono::milliseconds timeout, std::shared_ptr<ReadMode> read_mode)
      : work_(std::move(work)),
        on_success_(std::move(on_success)),
        what_(what),
        rank_(rank),
        timeout_(timeout),
        read_mode_(std::move(read_mode)) {}

  bool is_completed() override { return work_->isCompleted(); }

  // A wait that runs out of time throws Timeout but leaves a collective
  // pending (a late rank may still come); only a finished work's error is
  // final. Gloo itself ends a send or receive whose wait ran out (c10d passes
  // the wait's timeout to it), so that Timeout is final.
  void wait(std::chrono::milliseconds timeout) override {
    if (timeout == kNoTimeout) timeout = timeout_;
    if (!finished_) {
      std::optional<ReadMode::Waiting> waiting;
      if (read_mode_) waiting.emplace(*read_mode_);
      bool done = false;
      // Yield the core a bounded number of times before blocking: a futex
      // wake-up costs tens of microseconds on small VMs, and yielding hands
      // the core to c10d's worker and Gloo's reader threads, which finish
      // the work (4 KiB all_reduce, 2 ranks: 380-455 us -> 230-280 us).
      constexpr int kYieldsBeforeBlocking = 256;
      for (int i = 0; i < kYieldsBeforeBlocking && !work_->isCompleted(); ++i) {
        std::this_thread::yield();
      }
      try {
        done = work_->wait(timeout);
      } catch (const std::exception& e) {
        if (!work_->isCompleted()) throw Timeout(message(timeout) + ": " + without_backtrace(e));
        finish(outcome(timeout));
      }
      if (!done && !finished_) throw Timeout(message(timeout));
      if (!finished_) finish(nullptr);
    }
    if (error_) std::rethrow_exception(error_);
  }

  std::exception_ptr exception() override { return error_; }

 private:
  // Gloo reports a rank that never came and a closed connection with the
  // same type (IoException); only its message tells them apart ("Read
  // timeout", "Timed out waiting ...": checked by
  // //testing/process:timeout_gloo_2_*).
  std::exception_ptr failure(const std::exception& e, std::chrono::milliseconds timeout) const {
    const std::string text = e.what();
    const bool timed_out =
        dynamic_cast<const ::gloo::IoException*>(&e) != nullptr &&
        (text.find("timeout") != std::string::npos || text.find("Timed out") != std::string::npos);
    if (timed_out) return std::make_exception_ptr(Timeout(message(timeout) + ": " + e.what()));
    return peer_failure(rank_, what_, e);
  }

  // A completed work's own outcome, not the wait's error: when the wait
  // runs out as the work ends (Gloo's timeout and the wait's are often the
  // same), the wait reports c10d's "Operation timed out!" while the work
  // holds Gloo's error, or none.
  std::exception_ptr outcome(std::chrono::milliseconds timeout) const {
    const std::exception_ptr own = work_->exception();
    if (!own) return nullptr;
    try {
      std::rethrow_exception(own);
    } catch (const std::exception& e) {
      return failure(e, timeout);
    } catch (...) {
      return own;
    }
  }

  std::string message(std::chrono::milliseconds timeout) const {
    return on_rank(rank_, std::string("gloo ") + what_ + " did not complete within " +
                              std::to_string(timeout.count()) +
                              " ms: some rank never made the matching call (or died); end the job "
                              "and look at the other ranks");
  }

  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> on_success_;
  const char* what_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<ReadMode> read_mode_;
  bool finished_ = false;
  std::exception_ptr error_;

  // Records the outcome once: the work's error, or what on_success_ threw.
  void finish(std::exception_ptr error) {
    finished_ = true;
    error_ = error;
    if (error_ || !on_success_) return;
    try {
      on_success_();
    } catch (...) {
      error_ = std::current_exception();
    }
  }
};

// Gloo divides by the element count in some algorithms (allgather): a call
// with nothing to move completes at once instead, on every rank alike, since
// every rank passes the same shapes.
WorkPtr nothing_to_move() { return completed_work(); }

bool gloo_has_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      return true;
    default:
      return false;
  }
}

// Flat views of the (contiguous) tensors for Gloo's data movement, which is
// typed: dtypes Gloo lacks (bool, bfloat16) travel as uint8 bytes; the others
// keep their dtype (as bytes, c10d's large all_gather and broadcast measured
// 10-20% slower). Not reshape({-1}): a one-element tensor counts as
// contiguous whatever its stride, and reshape keeps that stride, which a
// byte view refuses.
at::Tensor as_flat(const at::Tensor& t) {
  at::Tensor flat = t.as_strided({t.numel()}, {1});
  return gloo_has_dtype(t.scalar_type()) ? flat : flat.view(at::kByte);
}

std::vector<at::Tensor> as_flat(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> out;
  for (const auto& t : list) out.push_back(as_flat(t));
  return out;
}

bool holds_one_input_a_rank(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                            int size) {
  return outputs.size() == static_cast<size_t>(size) &&
         std::all_of(outputs.begin(), outputs.end(), [&](const at::Tensor& output) {
           return output.scalar_type() == input.scalar_type() && output.numel() == input.numel();
         });
}

bool is_loopback(const std::string& host) {
  return host.empty() || host == "localhost" || host.rfind("127.", 0) == 0;
}

// The cores this process may run on (its affinity mask, which a launcher's
// binding or a container's cpuset narrows).
int usable_cores() {
  cpu_set_t cores;
  if (sched_getaffinity(0, sizeof(cores), &cores) != 0) return 1;
  return CPU_COUNT(&cores);
}

std::shared_ptr<Backend> create(const BackendOptions& options) {
  auto store = make_tcp_store(options, "gloo");
  // Ranks on one machine talk over loopback; otherwise Gloo picks the interface.
  const std::string hostname = is_loopback(options.master_addr) ? "127.0.0.1" : "";
  const bool may_spin = options.local_world_size <= usable_cores();
  return std::make_shared<GlooBackend>(store, options.rank, options.world_size, options.timeout,
                                       hostname, may_spin, options.rank);
}

const BackendRegistration registration("gloo", create);

}  // namespace

GlooBackend::GlooBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                         std::chrono::milliseconds timeout, const std::string& hostname,
                         bool may_spin, int world_rank)
    : store_(std::move(store)),
      rank_(rank),
      world_rank_(world_rank),
      size_(size),
      timeout_(timeout),
      hostname_(hostname),
      may_spin_(may_spin) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(hostname.empty()
                                 ? c10d::ProcessGroupGloo::createDefaultDevice()
                                 : c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
  group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank, size, options);
  if (size > 1) {
    pairs_ = std::make_unique<PairCollectives>(options->devices.front(), store_, rank, size,
                                               timeout, may_spin);
  }
}

WorkPtr GlooBackend::wrap(c10::intrusive_ptr<c10d::Work> work, const char* what,
                          std::function<void()> on_success) const {
  return std::make_shared<GlooWork>(std::move(work), std::move(on_success), what, world_rank_,
                                    timeout_, nullptr);
}

WorkPtr GlooBackend::wrap_pairs(c10::intrusive_ptr<c10d::Work> work, const char* what,
                                std::function<void()> on_success) const {
  return std::make_shared<GlooWork>(std::move(work), std::move(on_success), what, world_rank_,
                                    timeout_, pairs_->read_mode());
}

GlooBackend::Reduction GlooBackend::staged(const at::Tensor& tensor, ReduceOp op) const {
  switch (tensor.scalar_type()) {
    case at::kBool:
      return {tensor.to(at::kByte), op_for_bool(op)};
    case at::kBFloat16:
      return {tensor.to(at::kFloat), op};
    default:
      if (gloo_has_dtype(tensor.scalar_type())) return {tensor, op};
      throw InvalidArgument(on_rank(world_rank_, std::string("the gloo backend cannot reduce ") +
                                                     c10::toString(tensor.scalar_type()) +
                                                     " tensors: convert them first"));
  }
}

WorkPtr GlooBackend::all_reduce(at::Tensor& tensor, ReduceOp op) {
  if (tensor.numel() == 0) return nothing_to_move();
  if (pairs_ && pairs_->handles(tensor, op)) {
    return wrap_pairs(pairs_->all_reduce(tensor, op), "all_reduce");
  }
  const Reduction r = staged(tensor, op);
  std::vector<at::Tensor> tensors = {r.tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d_op(r.op);
  return wrap(group_->allreduce(tensors, options), "all_reduce", [tensor, r]() mutable {
    if (!r.tensor.is_same(tensor)) tensor.copy_(r.tensor);
  });
}

WorkPtr GlooBackend::broadcast(at::Tensor& tensor, int root) {
  if (tensor.numel() == 0) return nothing_to_move();
  if (pairs_ && pairs_->handles(tensor))
    return wrap_pairs(pairs_->broadcast(tensor, root), "broadcast");
  std::vector<at::Tensor> tensors = {as_flat(tensor)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  return wrap(group_->broadcast(tensors, options), "broadcast");
}

WorkPtr GlooBackend::reduce(at::Tensor& tensor, int root, ReduceOp op) {
  if (tensor.numel() == 0) return nothing_to_move();
  const bool is_root = rank_ == root;
  // Gloo may write the non-root buffers: give them a copy.
  const Reduction r = staged(is_root ? tensor : tensor.clone(), op);
  std::vector<at::Tensor> tensors = {r.tensor};
  c10d::ReduceOptions options;
  options.reduceOp = c10d_op(r.op);
  options.rootRank = root;
  return wrap(group_->reduce(tensors, options), "reduce", [tensor, r, is_root]() mutable {
    if (is_root && !r.tensor.is_same(tensor)) tensor.copy_(r.tensor);
  });
}

WorkPtr GlooBackend::all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  if (input.numel() == 0) return nothing_to_move();
  // A fresh block on input's device is plain exactly when the input is.
  if (pairs_ && holds_one_input_a_rank(outputs, input, size_) && pairs_->handles(input)) {
    // all_gather_into_tensor's path, which the debug checker counts as the
    // same call: ranks making one and ranks making the other still meet.
    at::Tensor block = at::empty({size_, input.numel()}, input.options());
    return wrap_pairs(pairs_->all_gather(block, input), "all_gather", [block, outputs]() mutable {
      for (size_t rank = 0; rank < outputs.size(); ++rank) {
        outputs[rank].copy_(block[rank].view(outputs[rank].sizes()));
      }
    });
  }
  std::vector<std::vector<at::Tensor>> out = {as_flat(outputs)};
  std::vector<at::Tensor> in = {as_flat(input)};
  return wrap(group_->allgather(out, in), "all_gather");
}

WorkPtr GlooBackend::all_gather_into_tensor(at::Tensor& output, const at::Tensor& input) {
  if (input.numel() == 0) return nothing_to_move();
  if (pairs_ && pairs_->handles(output, input)) {
    return wrap_pairs(pairs_->all_gather(output, input), "all_gather");
  }
  return Backend::all_gather_into_tensor(output, input);
}

WorkPtr GlooBackend::gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) {
  if (input.numel() == 0) return nothing_to_move();
  std::vector<std::vector<at::Tensor>> out;
  if (rank_ == root) out.push_back(as_flat(outputs));
  std::vector<at::Tensor> in = {as_flat(input)};
  c10d::GatherOptions options;
  options.rootRank = root;
  return wrap(group_->gather(out, in, options), "gather");
}

WorkPtr GlooBackend::scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) {
  if (output.numel() == 0) return nothing_to_move();
  std::vector<at::Tensor> out = {as_flat(output)};
  std::vector<std::vector<at::Tensor>> in;
  if (rank_ == root) in.push_back(as_flat(inputs));
  c10d::ScatterOptions options;
  options.rootRank = root;
  return wrap(group_->scatter(out, in, options), "scatter");
}

WorkPtr GlooBackend::reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                    ReduceOp op) {
  if (output.numel() == 0) return nothing_to_move();
  if (pairs_ && pairs_->handles(output, inputs, op)) {
    return wrap_pairs(pairs_->reduce_scatter(output, inputs, op), "reduce_scatter");
  }
  return reduce_scatter_through_all_reduce(output, torch::utils::flatten_dense_tensors(inputs), op);
}

WorkPtr GlooBackend::reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input,
                                           ReduceOp op) {
  if (output.numel() == 0) return nothing_to_move();
  if (pairs_ && input.is_contiguous()) {
    const std::vector<at::Tensor> blocks = input.view({-1}).split(output.numel());
    if (pairs_->handles(output, blocks, op)) {
      return wrap_pairs(pairs_->reduce_scatter(output, blocks, op), "reduce_scatter");
    }
  }
  return reduce_scatter_through_all_reduce(output, input.reshape({-1}).clone(), op);
}

// Where the pairs cannot take a call (a reduction the engine's kernel does
// not do, a strided tensor): all-reduce everything, keep this rank's chunk.
// `all` is a flat buffer of this call's own, overwritten.
WorkPtr GlooBackend::reduce_scatter_through_all_reduce(const at::Tensor& output, at::Tensor all,
                                                       ReduceOp op) {
  WorkPtr reduced = all_reduce(all, op);
  const int64_t count = output.numel();
  const int64_t offset = rank_ * count;
  return then(reduced, [all, output, count, offset]() mutable {
    output.view({-1}).copy_(all.narrow(0, offset, count));
  });
}

WorkPtr GlooBackend::all_to_all(std::vector<at::Tensor>& outputs,
                                const std::vector<at::Tensor>& inputs) {
  if (inputs.at(0).numel() == 0) return nothing_to_move();
  at::Tensor sent = torch::utils::flatten_dense_tensors(as_flat(inputs));
  at::Tensor received = at::empty_like(sent);
  std::vector<int64_t> equal_split;
  return wrap(group_->alltoall_base(received, sent, equal_split, equal_split), "all_to_all",
              [received, sent, outputs] {
                const auto targets = as_flat(outputs);
                const auto parts = torch::utils::unflatten_dense_tensors(received, targets);
                for (size_t i = 0; i < targets.size(); ++i) targets[i].copy_(parts[i]);
              });
}

WorkPtr GlooBackend::barrier() { return wrap(group_->barrier(), "barrier"); }

// c10d hands a send or receive to Gloo at once, in the caller's thread, so
// a connection that Gloo already closed (it does so when a receive's wait
// timed out) throws here: the error belongs to the Work, as for any call.
WorkPtr GlooBackend::point_to_point(
    const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& start) const {
  try {
    return wrap(start(), what);
  } catch (const ::gloo::IoException& e) {
    return completed_work(peer_failure(world_rank_, what, e));
  }
}

WorkPtr GlooBackend::send(const at::Tensor& tensor, int dst, int tag) {
  if (tensor.numel() == 0) return nothing_to_move();
  std::vector<at::Tensor> tensors = {as_flat(tensor)};
  return point_to_point("send", [&] { return group_->send(tensors, dst, tag); });
}

WorkPtr GlooBackend::recv(at::Tensor& tensor, int src, int tag) {
  if (tensor.numel() == 0) return nothing_to_move();
  std::vector<at::Tensor> tensors = {as_flat(tensor)};
  return point_to_point("recv", [&] { return group_->recv(tensors, src, tag); });
}

std::shared_ptr<Backend> GlooBackend::split(const std::vector<int>& ranks) {
  // Every rank counts its splits, so the members agree on the store prefix.
  const std::string prefix = "engine_group_" + std::to_string(++splits_);
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  barrier()->wait();
  if (me == ranks.end()) return nullptr;
  auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
  return std::make_shared<GlooBackend>(store, static_cast<int>(me - ranks.begin()),
                                       static_cast<int>(ranks.size()), timeout_, hostname_,
                                       may_spin_, world_rank_);
}

}  // namespace engine::dist::gloo
