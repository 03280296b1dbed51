#include "sim/sim_backend.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string_view>
#include <thread>

#include "engine/dist/describe.h"
#include "engine/dist/errors.h"
#include "engine/dist/reduce_kernel.h"

namespace sim {
namespace {

using engine::dist::ReduceOp;
using engine::dist::WorkPtr;
using Calls = GroupState::Calls;

// Reductions go through an accumulator this large, so that it stays in cache:
// every input byte is read once and every output byte written once.
constexpr int64_t kPieceBytes = 64 * 1024;

struct Span {
  int64_t begin;
  int64_t end;
};

// Element range k of `numel` cut into `parts` near-equal pieces.
Span chunk(int64_t numel, int parts, int k) {
  const int64_t base = numel / parts;
  const int64_t extra = numel % parts;
  const int64_t begin = k * base + std::min<int64_t>(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

char* bytes_of(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

void copy_bytes(const at::Tensor& to, const at::Tensor& from) {
  if (from.nbytes() > 0) std::memcpy(bytes_of(to), bytes_of(from), from.nbytes());
}

// targets[i][span] = reduction over sources of sources[j][span]. Sources
// may be targets too (in place): each piece is reduced before it is written.
void reduce_span(const std::vector<at::Tensor>& sources, const std::vector<at::Tensor>& targets,
                 Span span, c10::ScalarType dtype, ReduceOp op) {
  const int64_t element = c10::elementSize(dtype);
  const int64_t piece = kPieceBytes / element;
  thread_local std::vector<double> accumulator(kPieceBytes / sizeof(double));
  char* acc = reinterpret_cast<char*>(accumulator.data());
  for (int64_t offset = span.begin; offset < span.end; offset += piece) {
    const int64_t count = std::min(piece, span.end - offset);
    const int64_t at = offset * element;
    std::memcpy(acc, bytes_of(sources[0]) + at, count * element);
    for (size_t j = 1; j < sources.size(); ++j) {
      engine::dist::reduce_into(acc, bytes_of(sources[j]) + at, count, dtype, op);
    }
    for (const auto& target : targets) std::memcpy(bytes_of(target) + at, acc, count * element);
  }
}

std::vector<at::Tensor> tensors_of(const Calls& calls) {
  std::vector<at::Tensor> out;
  for (const auto* call : calls) out.push_back(call->tensor);
  return out;
}

std::function<std::string(const Calls&)> reducible(ReduceOp op) {
  return [op](const Calls& calls) -> std::string {
    const c10::ScalarType dtype = calls[0]->dtype;
    if (engine::dist::can_reduce(dtype, op)) return "";
    return std::string("the simulator cannot reduce ") + c10::toString(dtype) + " with " +
           engine::dist::reduce_op_name(op) + "; use a real number, integer or bool dtype";
  };
}

std::string no_check(const Calls&) { return ""; }

// The Work of a posted send: completes once the receiver copied the data.
class SendWork : public engine::dist::Work {
 public:
  SendWork(std::shared_ptr<GroupState> group, std::shared_ptr<GroupState::PendingSend> pending)
      : group_(std::move(group)), pending_(std::move(pending)) {}

  bool is_completed() override { return group_->send_done(*pending_); }

  void wait(std::chrono::milliseconds timeout) override {
    if (!error_ && !waited_) {
      try {
        group_->wait_send(pending_, timeout);
      } catch (const engine::dist::DistError&) {
        error_ = std::current_exception();
      }
      waited_ = true;
    }
    if (error_) std::rethrow_exception(error_);
  }

  std::exception_ptr exception() override { return error_; }

 private:
  std::shared_ptr<GroupState> group_;
  std::shared_ptr<GroupState::PendingSend> pending_;
  bool waited_ = false;
  std::exception_ptr error_;
};

// What a hostile peer sends: every byte of `tensor` drawn from `seed`
// (the engine's frames are contiguous; other views are left as they are).
void garble_bytes(const at::Tensor& tensor, uint64_t seed) {
  if (!tensor.defined() || !tensor.is_contiguous()) return;
  std::mt19937_64 bytes(seed);
  char* data = bytes_of(tensor);
  for (size_t i = 0; i < tensor.nbytes(); ++i) data[i] = static_cast<char>(bytes());
}

}  // namespace

SimBackend::SimBackend(std::shared_ptr<WorldState> world, std::shared_ptr<GroupState> group,
                       int rank, std::shared_ptr<std::mt19937_64> jitter)
    : world_(std::move(world)),
      group_(std::move(group)),
      rank_(rank),
      jitter_rng_(std::move(jitter)) {}

CallRecord SimBackend::record(const char* kind, const at::Tensor& like) {
  if (const auto garble = world_->before_call(group_->global_rank(rank_), kind)) {
    garble_bytes(like, *garble);
  }
  CallRecord call;
  call.kind = kind;
  // Point-to-point calls count apart, as the debug mode and the flight
  // recorder count them: the ranks outside a send/recv pair do not see it,
  // and their next collective must still match the pair's.
  const std::string_view name(kind);
  call.seq = name == "send" || name == "recv" ? ++point_to_point_seq_ : ++collective_seq_;
  if (like.defined()) {
    call.dtype = like.scalar_type();
    call.shape = like.sizes().vec();
  }
  return call;
}

std::optional<std::chrono::milliseconds> SimBackend::node_shared_wait() const {
  if (!world_->options().node_shared_buffers) return std::nullopt;
  return world_->options().timeout;
}

void SimBackend::check_root(int root) const {
  if (root < 0 || root >= size()) {
    throw engine::dist::InvalidArgument(engine::dist::on_rank(
        group_->global_rank(rank_), "root " + std::to_string(root) + " is outside group " +
                                        group_->name() + " of size " + std::to_string(size())));
  }
}

void SimBackend::jitter() {
  const auto max = world_->options().max_jitter.count();
  if (max <= 0 || world_->options().deterministic) return;
  const auto pause = std::uniform_int_distribution<int64_t>(0, max)(*jitter_rng_);
  std::this_thread::sleep_for(std::chrono::microseconds(pause));
}

WorkPtr SimBackend::run(const std::function<void()>& body) {
  jitter();
  try {
    body();
  } catch (const engine::dist::DistError&) {
    return engine::dist::completed_work(std::current_exception());
  }
  return engine::dist::completed_work();
}

WorkPtr SimBackend::all_reduce(at::Tensor& tensor, ReduceOp op) {
  CallRecord call = record("all_reduce", tensor);
  call.op = op;
  call.tensor = tensor;
  return run([&] {
    group_->collective(rank_, call, reducible(op), [&](int k, const Calls& calls) {
      const auto all = tensors_of(calls);
      reduce_span(all, all, chunk(call.tensor.numel(), size(), k), call.dtype, op);
    });
  });
}

WorkPtr SimBackend::reduce(at::Tensor& tensor, int root, ReduceOp op) {
  check_root(root);
  CallRecord call = record("reduce", tensor);
  call.op = op;
  call.root = root;
  call.tensor = tensor;
  return run([&] {
    group_->collective(rank_, call, reducible(op), [&](int k, const Calls& calls) {
      reduce_span(tensors_of(calls), {calls[root]->tensor}, chunk(call.tensor.numel(), size(), k),
                  call.dtype, op);
    });
  });
}

WorkPtr SimBackend::broadcast(at::Tensor& tensor, int root) {
  check_root(root);
  CallRecord call = record("broadcast", tensor);
  call.root = root;
  call.tensor = tensor;
  return run([&] {
    group_->collective(rank_, call, no_check, [&](int k, const Calls& calls) {
      if (k != root) copy_bytes(calls[k]->tensor, calls[root]->tensor);
    });
  });
}

WorkPtr SimBackend::all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  CallRecord call = record("all_gather", input);
  call.tensor = input;
  call.outputs = outputs;
  return run([&] {
    group_->collective(rank_, call, no_check, [&](int k, const Calls& calls) {
      for (const auto* receiver : calls) copy_bytes(receiver->outputs[k], calls[k]->tensor);
    });
  });
}

WorkPtr SimBackend::gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) {
  check_root(root);
  CallRecord call = record("gather", input);
  call.root = root;
  call.tensor = input;
  call.outputs = outputs;
  return run([&] {
    group_->collective(rank_, call, no_check, [&](int k, const Calls& calls) {
      copy_bytes(calls[root]->outputs[k], calls[k]->tensor);
    });
  });
}

WorkPtr SimBackend::scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) {
  check_root(root);
  CallRecord call = record("scatter", output);
  call.root = root;
  call.tensor = output;
  call.inputs = inputs;
  return run([&] {
    group_->collective(rank_, call, no_check, [&](int k, const Calls& calls) {
      copy_bytes(calls[k]->tensor, calls[root]->inputs[k]);
    });
  });
}

WorkPtr SimBackend::reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                   ReduceOp op) {
  CallRecord call = record("reduce_scatter", output);
  call.op = op;
  call.tensor = output;
  call.inputs = inputs;
  return run([&] {
    group_->collective(rank_, call, reducible(op), [&](int k, const Calls& calls) {
      std::vector<at::Tensor> sources;
      for (const auto* sender : calls) sources.push_back(sender->inputs[k]);
      reduce_span(sources, {calls[k]->tensor}, {0, call.tensor.numel()}, call.dtype, op);
    });
  });
}

WorkPtr SimBackend::all_to_all(std::vector<at::Tensor>& outputs,
                               const std::vector<at::Tensor>& inputs) {
  CallRecord call = record("all_to_all", inputs.at(0));
  call.inputs = inputs;
  call.outputs = outputs;
  return run([&] {
    group_->collective(rank_, call, no_check, [&](int k, const Calls& calls) {
      for (int s = 0; s < size(); ++s) copy_bytes(calls[k]->outputs[s], calls[s]->inputs[k]);
    });
  });
}

WorkPtr SimBackend::barrier() {
  CallRecord call = record("barrier", at::Tensor());
  return run([&] { group_->collective(rank_, call, no_check, [](int, const Calls&) {}); });
}

WorkPtr SimBackend::send(const at::Tensor& tensor, int dst, int tag) {
  check_root(dst);
  CallRecord call = record("send", tensor);
  call.tensor = tensor;
  call.peer = dst;
  jitter();
  try {
    return std::make_shared<SendWork>(group_, group_->post_send(rank_, std::move(call), dst, tag));
  } catch (const engine::dist::DistError&) {
    return engine::dist::completed_work(std::current_exception());
  }
}

WorkPtr SimBackend::recv(at::Tensor& tensor, int src, int tag) {
  check_root(src);
  CallRecord call = record("recv", tensor);
  call.tensor = tensor;
  call.peer = src;
  return run([&] { group_->recv(rank_, call, src, tag); });
}

std::shared_ptr<engine::dist::Backend> SimBackend::split(const std::vector<int>& ranks) {
  CallRecord call = record("new_group", at::Tensor());
  call.ranks = ranks;
  run([&] { group_->collective(rank_, call, no_check, [](int, const Calls&) {}); })->wait();
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) return nullptr;
  std::vector<int> global;
  for (const int r : ranks) global.push_back(group_->global_rank(r));
  const std::string key = group_->name() + "/new_group#" + std::to_string(call.seq);
  return std::make_shared<SimBackend>(world_, world_->group(key, global),
                                      static_cast<int>(me - ranks.begin()), jitter_rng_);
}

}  // namespace sim
