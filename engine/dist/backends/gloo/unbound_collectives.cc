#include "engine/dist/backends/gloo/unbound_collectives.h"

#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/gather.h>
#include <gloo/scatter.h>
#include <gloo/types.h>

#include <algorithm>
#include <utility>

namespace engine::dist::gloo {
namespace {

// Above Gloo's collectives' slot prefixes (gloo/types.h), so that a send or
// receive never matches a collective's message.
constexpr uint8_t kPointToPointSlotPrefix = 0x80;

uint8_t* bytes(const at::Tensor& tensor) { return static_cast<uint8_t*>(tensor.data_ptr()); }

}  // namespace

// A posted send or receive; waiting for it waits for Gloo's buffer.
class UnboundCollectives::Transfer : public c10d::Work {
 public:
  Transfer(at::Tensor tensor, std::unique_ptr<::gloo::transport::UnboundBuffer> buffer,
           bool is_send, std::chrono::milliseconds timeout)
      : tensor_(std::move(tensor)),
        buffer_(std::move(buffer)),
        is_send_(is_send),
        timeout_(timeout) {}

  bool wait(std::chrono::milliseconds timeout) override {
    if (isCompleted()) return c10d::Work::wait(timeout);
    if (timeout == kNoTimeout) timeout = timeout_;
    try {
      if (is_send_) {
        buffer_->waitSend(timeout);
      } else {
        buffer_->waitRecv(timeout);
      }
    } catch (...) {
      finishAndThrow(std::current_exception());
    }
    finish();
    return true;
  }

 private:
  at::Tensor tensor_;  // kept alive while Gloo may use its memory
  std::unique_ptr<::gloo::transport::UnboundBuffer> buffer_;
  bool is_send_;
  std::chrono::milliseconds timeout_;
};

UnboundCollectives::UnboundCollectives(std::shared_ptr<::gloo::transport::Device> device,
                                       std::shared_ptr<::gloo::rendezvous::Store> store, int rank,
                                       int size, std::chrono::milliseconds timeout)
    : context_(std::make_shared<::gloo::rendezvous::Context>(rank, size)), timeout_(timeout) {
  context_->setTimeout(timeout);
  context_->connectFullMesh(std::move(store), device);
}

c10::intrusive_ptr<c10d::Work> UnboundCollectives::gather(const at::Tensor& input,
                                                          const at::Tensor& gathered, int root) {
  return queue_.enqueue([this, input, gathered, root] {
    ::gloo::GatherOptions options(context_);
    options.setInput(bytes(input), input.nbytes());
    if (context_->rank == root) options.setOutput(bytes(gathered), gathered.nbytes());
    options.setRoot(root);
    options.setTag(next_tag());
    options.setTimeout(timeout_);
    ::gloo::gather(options);
  });
}

c10::intrusive_ptr<c10d::Work> UnboundCollectives::scatter(const at::Tensor& output,
                                                           const std::vector<at::Tensor>& inputs,
                                                           int root) {
  return queue_.enqueue([this, output, inputs, root] {
    ::gloo::ScatterOptions options(context_);
    if (context_->rank == root) {
      std::vector<uint8_t*> pointers;
      for (const at::Tensor& input : inputs) pointers.push_back(bytes(input));
      options.setInputs(pointers, output.nbytes());
    }
    options.setOutput(bytes(output), output.nbytes());
    options.setRoot(root);
    options.setTag(next_tag());
    options.setTimeout(timeout_);
    ::gloo::scatter(options);
  });
}

c10::intrusive_ptr<c10d::Work> UnboundCollectives::all_to_all(const at::Tensor& sent,
                                                              std::vector<int64_t> sent_bytes,
                                                              const at::Tensor& received,
                                                              std::vector<int64_t> received_bytes) {
  return queue_.enqueue([this, sent, sent_bytes = std::move(sent_bytes), received,
                         received_bytes = std::move(received_bytes)] {
    ::gloo::AlltoallvOptions options(context_);
    options.setInput(bytes(sent), sent_bytes);
    options.setOutput(bytes(received), received_bytes);
    options.setTag(next_tag());
    options.setTimeout(timeout_);
    ::gloo::alltoallv(options);
  });
}

c10::intrusive_ptr<c10d::Work> UnboundCollectives::barrier() {
  return queue_.enqueue([this] {
    ::gloo::BarrierOptions options(context_);
    options.setTag(next_tag());
    options.setTimeout(timeout_);
    ::gloo::barrier(options);
  });
}

c10::intrusive_ptr<c10d::Work> UnboundCollectives::send(const at::Tensor& tensor, int dst,
                                                        int tag) {
  auto buffer = context_->createUnboundBuffer(tensor.data_ptr(), tensor.nbytes());
  buffer->send(dst, ::gloo::Slot::build(kPointToPointSlotPrefix, static_cast<uint32_t>(tag)));
  return c10::make_intrusive<Transfer>(tensor, std::move(buffer), /*is_send=*/true, timeout_);
}

c10::intrusive_ptr<c10d::Work> UnboundCollectives::recv(const at::Tensor& tensor, int src,
                                                        int tag) {
  auto buffer = context_->createUnboundBuffer(tensor.data_ptr(), tensor.nbytes());
  buffer->recv(src, ::gloo::Slot::build(kPointToPointSlotPrefix, static_cast<uint32_t>(tag)));
  return c10::make_intrusive<Transfer>(tensor, std::move(buffer), /*is_send=*/false, timeout_);
}

}  // namespace engine::dist::gloo
