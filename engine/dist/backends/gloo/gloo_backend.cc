#include "engine/dist/backends/gloo/gloo_backend.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <gloo/common/error.h>
#include <gloo/transport/tcp/device.h>
#include <sched.h>
#include <torch/csrc/utils/tensor_flatten.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "engine/dist/backend_registry.h"
#include "engine/dist/backends/gloo/gloo_tensors.h"
#include "engine/dist/backends/gloo/gloo_work.h"
#include "engine/dist/backends/gloo/interface.h"
#include "engine/dist/backends/gloo/rendezvous_store.h"
#include "engine/dist/backends/store/tcp_store.h"
#include "engine/dist/errors.h"
#include "engine/dist/reduce_kernel.h"

namespace engine::dist::gloo {
namespace {

// Gloo divides by the element count in some algorithms: a call with nothing
// to move completes at once instead, on every rank alike, since every rank
// passes the same shapes.
WorkPtr nothing_to_move() { return completed_work(); }

// The cores this process may run on (its affinity mask, which a launcher's
// binding or a container's cpuset narrows).
int usable_cores() {
  cpu_set_t cores;
  if (sched_getaffinity(0, sizeof(cores), &cores) != 0) return 1;
  return CPU_COUNT(&cores);
}

// Bound to the endpoint choose_endpoint picks (interface.h).
std::shared_ptr<::gloo::transport::Device> make_device(const BackendOptions& options) {
  const Endpoint endpoint =
      choose_endpoint(options.master_addr, std::getenv("GLOO_SOCKET_IFNAME"),
                      /*spans_machines=*/options.local_world_size < options.world_size,
                      options.rank, this_machine());
  ::gloo::transport::tcp::attr attr;
  attr.hostname = endpoint.hostname;
  attr.iface = endpoint.interface;
  return ::gloo::transport::tcp::CreateDevice(attr);
}

// The device first: a rank whose address cannot work says so before it
// meets the store, where its peers would wait for it.
std::shared_ptr<Backend> create(const BackendOptions& options) {
  auto device = make_device(options);
  auto store = make_tcp_store(options, "gloo");
  const bool may_spin = options.local_world_size <= usable_cores();
  return std::make_shared<GlooBackend>(store, options.rank, options.world_size, options.timeout,
                                       std::move(device), may_spin, options.rank);
}

const BackendRegistration registration("gloo", create);

}  // namespace

GlooBackend::GlooBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                         std::chrono::milliseconds timeout,
                         std::shared_ptr<::gloo::transport::Device> device, bool may_spin,
                         int world_rank)
    : store_(std::move(store)),
      device_(std::move(device)),
      rank_(rank),
      world_rank_(world_rank),
      size_(size),
      timeout_(timeout),
      may_spin_(may_spin) {
  if (size > 1) {
    pairs_ = std::make_unique<PairCollectives>(
        device_, std::make_shared<RendezvousStore>(store_, "engine_pair_collectives"), rank, size,
        timeout, may_spin);
  }
  unbound_ = std::make_unique<UnboundCollectives>(
      device_, std::make_shared<RendezvousStore>(store_, "engine_unbound_collectives"), rank, size,
      timeout);
  // Construction ends together on every member: a member that made no call
  // on the group could otherwise drop its connections while a peer still
  // finishes connecting its own.
  if (size > 1) barrier()->wait();
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

void GlooBackend::check_reducible(const at::Tensor& tensor, ReduceOp op) const {
  if (can_reduce(tensor.scalar_type(), op)) return;
  throw InvalidArgument(on_rank(world_rank_, std::string("the gloo backend cannot reduce ") +
                                                 c10::toString(tensor.scalar_type()) + " with " +
                                                 reduce_op_name(op) +
                                                 "; use a real number, integer or bool dtype"));
}

WorkPtr GlooBackend::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_reducible(tensor, op);
  if (tensor.numel() == 0 || !pairs_) return nothing_to_move();
  const at::Tensor reduced = plain(tensor);
  return wrap_pairs(pairs_->all_reduce(reduced, op), "all_reduce",
                    [tensor, reduced]() mutable { copy_back(tensor, reduced); });
}

WorkPtr GlooBackend::broadcast(at::Tensor& tensor, int root) {
  if (tensor.numel() == 0 || !pairs_) return nothing_to_move();
  const at::Tensor sent = plain(tensor);
  return wrap_pairs(pairs_->broadcast(sent, root), "broadcast",
                    [tensor, sent]() mutable { copy_back(tensor, sent); });
}

WorkPtr GlooBackend::reduce(at::Tensor& tensor, int root, ReduceOp op) {
  check_reducible(tensor, op);
  if (tensor.numel() == 0 || !pairs_) return nothing_to_move();
  const bool is_root = rank_ == root;
  // Only the root's tensor changes: its peers reduce a copy.
  const at::Tensor reduced = is_root ? plain(tensor) : plain(tensor).clone();
  return wrap_pairs(pairs_->all_reduce(reduced, op), "reduce",
                    [tensor, reduced, is_root]() mutable {
                      if (is_root) copy_back(tensor, reduced);
                    });
}

WorkPtr GlooBackend::all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  if (input.numel() == 0) return nothing_to_move();
  if (!holds_one_input_a_rank(outputs, input, size_)) {
    throw InvalidArgument(on_rank(world_rank_,
                                  "gloo all_gather needs one output a rank, each of "
                                  "the input's dtype and element count"));
  }
  // all_gather_into_tensor's path, which the debug checker counts as the
  // same call: ranks making one and ranks making the other still meet.
  at::Tensor block = block_for(input, size_);
  if (!pairs_) {
    copy_rows(outputs, block.copy_(input.reshape({1, -1})));
    return nothing_to_move();
  }
  return wrap_pairs(pairs_->all_gather(block, plain(input)), "all_gather",
                    [block, outputs] { copy_rows(outputs, block); });
}

WorkPtr GlooBackend::all_gather_into_tensor(at::Tensor& output, const at::Tensor& input) {
  if (input.numel() == 0) return nothing_to_move();
  const at::Tensor gathered = plain(output);
  const at::Tensor sent = plain(input);
  if (pairs_ && pairs_->takes_all_gather(gathered, sent)) {
    return wrap_pairs(pairs_->all_gather(gathered, sent), "all_gather",
                      [output, gathered]() mutable { copy_back(output, gathered); });
  }
  return Backend::all_gather_into_tensor(output, input);
}

WorkPtr GlooBackend::gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) {
  if (input.numel() == 0) return nothing_to_move();
  const bool is_root = rank_ == root;
  if (is_root && !holds_one_input_a_rank(outputs, input, size_)) {
    throw InvalidArgument(on_rank(world_rank_,
                                  "gloo gather needs one output a rank on the root, "
                                  "each of the input's dtype and element count"));
  }
  at::Tensor block = is_root ? block_for(input, size_) : at::Tensor();
  return wrap(unbound_->gather(plain(input), block, root), "gather", [block, outputs, is_root] {
    if (is_root) copy_rows(outputs, block);
  });
}

WorkPtr GlooBackend::scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) {
  if (output.numel() == 0) return nothing_to_move();
  const at::Tensor received = plain(output);
  const std::vector<at::Tensor> sent = rank_ == root ? plain(inputs) : std::vector<at::Tensor>();
  return wrap(unbound_->scatter(received, sent, root), "scatter",
              [output, received]() mutable { copy_back(output, received); });
}

WorkPtr GlooBackend::reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                    ReduceOp op) {
  check_reducible(output, op);
  if (output.numel() == 0) return nothing_to_move();
  const at::Tensor reduced = plain(output);
  const std::vector<at::Tensor> blocks = plain(inputs);
  if (pairs_ && pairs_->takes_reduce_scatter(reduced, blocks, op)) {
    return wrap_pairs(pairs_->reduce_scatter(reduced, blocks, op), "reduce_scatter",
                      [output, reduced]() mutable { copy_back(output, reduced); });
  }
  return reduce_scatter_through_all_reduce(output, torch::utils::flatten_dense_tensors(inputs), op);
}

WorkPtr GlooBackend::reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input,
                                           ReduceOp op) {
  check_reducible(output, op);
  if (output.numel() == 0) return nothing_to_move();
  const at::Tensor reduced = plain(output);
  const std::vector<at::Tensor> blocks = plain(input).view({-1}).split(output.numel());
  if (pairs_ && pairs_->takes_reduce_scatter(reduced, blocks, op)) {
    return wrap_pairs(pairs_->reduce_scatter(reduced, blocks, op), "reduce_scatter",
                      [output, reduced]() mutable { copy_back(output, reduced); });
  }
  return reduce_scatter_through_all_reduce(output, input.reshape({-1}).clone(), op);
}

// Where the pairs cannot take a call (blocks of other sizes, or one rank):
// all-reduce everything, keep this rank's chunk. `all` is a flat buffer of
// this call's own, overwritten.
WorkPtr GlooBackend::reduce_scatter_through_all_reduce(const at::Tensor& output, at::Tensor all,
                                                       ReduceOp op) {
  WorkPtr reduced = all_reduce(all, op);
  const int64_t count = output.numel();
  const int64_t offset = rank_ * count;
  return then(reduced, [all, output, count, offset]() mutable {
    output.view({-1}).copy_(all.narrow(0, offset, count));
  });
}

// Each rank's inputs, joined, go to the ranks in rank order (Gloo's
// alltoallv, in bytes).
WorkPtr GlooBackend::all_to_all(std::vector<at::Tensor>& outputs,
                                const std::vector<at::Tensor>& inputs) {
  if (inputs.at(0).numel() == 0) return nothing_to_move();
  std::vector<at::Tensor> sent_parts;
  std::vector<int64_t> sent_bytes;
  for (const at::Tensor& input : inputs) {
    sent_parts.push_back(bytes_of(plain(input)));
    sent_bytes.push_back(static_cast<int64_t>(input.nbytes()));
  }
  std::vector<int64_t> received_bytes;
  for (const at::Tensor& output : outputs) {
    received_bytes.push_back(static_cast<int64_t>(output.nbytes()));
  }
  const int64_t total = std::accumulate(received_bytes.begin(), received_bytes.end(), int64_t{0});
  at::Tensor received = at::empty({total}, at::TensorOptions().dtype(at::kByte));
  return wrap(unbound_->all_to_all(at::cat(sent_parts), sent_bytes, received, received_bytes),
              "all_to_all", [received, outputs] {
                int64_t offset = 0;
                for (at::Tensor output : outputs) {
                  const auto bytes = static_cast<int64_t>(output.nbytes());
                  const at::Tensor part = received.narrow(0, offset, bytes);
                  output.copy_(part.view(output.scalar_type()).view(output.sizes()));
                  offset += bytes;
                }
              });
}

WorkPtr GlooBackend::barrier() { return wrap(unbound_->barrier(), "barrier"); }

// A send or receive is handed to Gloo at once, in the caller's thread, so a
// connection that Gloo already closed (it does so when a receive's wait
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
  const at::Tensor sent = plain(tensor);
  return point_to_point("send", [&] { return unbound_->send(sent, dst, tag); });
}

WorkPtr GlooBackend::recv(at::Tensor& tensor, int src, int tag) {
  if (tensor.numel() == 0) return nothing_to_move();
  const at::Tensor received = plain(tensor);
  WorkPtr work = point_to_point("recv", [&] { return unbound_->recv(received, src, tag); });
  return then(work, [tensor, received]() mutable { copy_back(tensor, received); });
}

std::shared_ptr<Backend> GlooBackend::split(const std::vector<int>& ranks) {
  // Every rank counts its splits, so the members agree on the store prefix.
  const std::string prefix = "engine_group_" + std::to_string(++splits_);
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  barrier()->wait();
  if (me == ranks.end()) return nullptr;
  auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
  return std::make_shared<GlooBackend>(store, static_cast<int>(me - ranks.begin()),
                                       static_cast<int>(ranks.size()), timeout_, device_, may_spin_,
                                       world_rank_);
}

}  // namespace engine::dist::gloo
