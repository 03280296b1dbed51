#include "engine/dist/backends/gloo/small_collectives.h"

#include <gloo/allgather_ring.h>

#include <algorithm>
#include <cstring>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#include "engine/dist/reduce_kernel.h"

namespace engine::dist::gloo {
namespace {

// A training loop reduces the same few sizes; past this many sizes, all rings
// are dropped at once, on every rank alike.
constexpr size_t kMaxRings = 64;

}  // namespace

// Gloo's ring all_gather of `bytes` per rank, bound to buffers of its own
// (Gloo registers them with its transport).
class SmallCollectives::Ring {
 public:
  Ring(const std::shared_ptr<::gloo::Context>& context, size_t bytes)
      : input_(bytes),
        gathered_(bytes * context->size),
        algorithm_(context, {input_.data()}, gathered_.data(), static_cast<int>(bytes)) {}
  // Gloo's algorithms may throw from their destructors; this one only frees memory.
  ~Ring() noexcept {}

  // The ranks' copies of `data`, one after the other in rank order.
  const uint8_t* gather(const void* data) {
    std::memcpy(input_.data(), data, input_.size());
    algorithm_.run();
    return gathered_.data();
  }

 private:
  std::vector<uint8_t> input_;
  std::vector<uint8_t> gathered_;
  ::gloo::AllgatherRing<uint8_t> algorithm_;
};

// One queued call; c10d's Work gives it the waiting and the error.
class SmallCollectives::Task : public c10d::Work {
 public:
  Task(at::Tensor input, UseGathered use) : input_(std::move(input)), use_(std::move(use)) {}

  void run(SmallCollectives& collectives) {
    try {
      const size_t bytes = input_.nbytes();
      use_(collectives.ring_for(bytes).gather(input_.data_ptr()), bytes);
      finish();
    } catch (...) {
      finish(std::current_exception());
    }
  }

 private:
  at::Tensor input_;
  UseGathered use_;
};

SmallCollectives::SmallCollectives(const std::shared_ptr<::gloo::transport::Device>& device,
                                   const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : context_(std::make_shared<::gloo::rendezvous::Context>(rank, size)) {
  context_->setTimeout(timeout);
  c10d::ProcessGroupGloo::GlooStore rendezvous(
      c10::make_intrusive<c10d::PrefixStore>("engine_small_collectives", store));
  auto shared_device = device;
  context_->connectFullMesh(rendezvous, shared_device);
  use_synchronous_pairs();
  server_ = std::thread([this] { serve(); });
}

// In synchronous mode the thread that waits for a message reads it from the
// socket itself, instead of Gloo's device thread reading it and waking the
// waiter: one thread hand-off fewer per message, which is most of a small
// call's time. It is safe here because one thread (serve) runs every call on
// these pairs, and a write cannot block for long: Gloo sizes a pair's send
// buffer to the message (at most kMaxBytes), and the rings' notifications
// keep at most one unread data message on each connection. A peer that goes
// silent still ends the call: the socket's receive timeout is the context's.
void SmallCollectives::use_synchronous_pairs() {
  for (int peer = 0; peer < context_->size; ++peer) {
    if (peer != context_->rank) context_->getPair(peer)->setSync(/*sync=*/true, /*busyPoll=*/false);
  }
}

SmallCollectives::~SmallCollectives() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_one();
  server_.join();
}

bool SmallCollectives::handles(const at::Tensor& tensor) const {
  return tensor.device().is_cpu() && tensor.layout() == at::kStrided && tensor.is_contiguous() &&
         tensor.nbytes() <= static_cast<size_t>(kMaxBytes);
}

bool SmallCollectives::handles(const at::Tensor& tensor, ReduceOp op) const {
  return handles(tensor) && can_reduce(tensor.scalar_type(), op);
}

bool SmallCollectives::handles(const std::vector<at::Tensor>& outputs,
                               const at::Tensor& input) const {
  return handles(input) && outputs.size() == static_cast<size_t>(context_->size) &&
         std::all_of(outputs.begin(), outputs.end(), [&](const at::Tensor& out) {
           return handles(out) && out.nbytes() == input.nbytes();
         });
}

c10::intrusive_ptr<c10d::Work> SmallCollectives::all_reduce(const at::Tensor& tensor, ReduceOp op) {
  const int ranks = context_->size;
  return enqueue(tensor, [tensor, op, ranks](const uint8_t* gathered, size_t bytes) {
    std::memcpy(tensor.data_ptr(), gathered, bytes);
    for (int rank = 1; rank < ranks; ++rank) {
      reduce_into(tensor.data_ptr(), gathered + rank * bytes, tensor.numel(), tensor.scalar_type(),
                  op);
    }
  });
}

c10::intrusive_ptr<c10d::Work> SmallCollectives::broadcast(const at::Tensor& tensor, int root) {
  const bool is_root = context_->rank == root;
  return enqueue(tensor, [tensor, root, is_root](const uint8_t* gathered, size_t bytes) {
    if (!is_root) std::memcpy(tensor.data_ptr(), gathered + root * bytes, bytes);
  });
}

c10::intrusive_ptr<c10d::Work> SmallCollectives::all_gather(const std::vector<at::Tensor>& outputs,
                                                            const at::Tensor& input) {
  return enqueue(input, [outputs](const uint8_t* gathered, size_t bytes) {
    for (size_t rank = 0; rank < outputs.size(); ++rank) {
      std::memcpy(outputs[rank].data_ptr(), gathered + rank * bytes, bytes);
    }
  });
}

c10::intrusive_ptr<c10d::Work> SmallCollectives::enqueue(const at::Tensor& input, UseGathered use) {
  auto task = c10::make_intrusive<Task>(input, std::move(use));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(task);
  }
  queued_.notify_one();
  return task;
}

void SmallCollectives::serve() {
  for (;;) {
    c10::intrusive_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task->run(*this);
  }
}

SmallCollectives::Ring& SmallCollectives::ring_for(size_t bytes) {
  if (rings_.size() >= kMaxRings && rings_.count(bytes) == 0) rings_.clear();
  RingPair& pair = rings_[bytes];
  std::unique_ptr<Ring>& ring = pair.rings[pair.next];
  pair.next = 1 - pair.next;
  if (!ring) ring = std::make_unique<Ring>(context_, bytes);
  return *ring;
}

}  // namespace engine::dist::gloo
