#pragma once

#include <ATen/core/Tensor.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/device.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "engine/dist/backends/gloo/call_queue.h"

namespace engine::dist::gloo {

// gather, scatter, all_to_all and barrier as Gloo's own algorithms, and
// send and receive, on a Gloo context of the adapter's own whose pairs are
// asynchronous (Gloo's device thread reads every message), with unbound
// buffers. The collectives run in call order on one thread of their own;
// a send or receive is posted at once, in the caller's thread, and its work
// waits for it, so sends and receives never wait behind a collective.
//
// Every tensor here is plain: a CPU tensor, contiguous; the backend copies
// others in and out. Sizes are in bytes.
class UnboundCollectives {
 public:
  // Connects a full mesh of `size` ranks through `store` (a collective call;
  // the store's keys are this context's own).
  UnboundCollectives(std::shared_ptr<::gloo::transport::Device> device,
                     std::shared_ptr<::gloo::rendezvous::Store> store, int rank, int size,
                     std::chrono::milliseconds timeout);

  // `gathered` (the root's only; one input a rank, in rank order).
  c10::intrusive_ptr<c10d::Work> gather(const at::Tensor& input, const at::Tensor& gathered,
                                        int root);
  // `inputs` (the root's only; one a rank, each of output's size).
  c10::intrusive_ptr<c10d::Work> scatter(const at::Tensor& output,
                                         const std::vector<at::Tensor>& inputs, int root);
  // `sent` holds the bytes for rank p after those for p - 1, `sent_bytes[p]`
  // of them; `received` likewise, from each rank.
  c10::intrusive_ptr<c10d::Work> all_to_all(const at::Tensor& sent, std::vector<int64_t> sent_bytes,
                                            const at::Tensor& received,
                                            std::vector<int64_t> received_bytes);
  c10::intrusive_ptr<c10d::Work> barrier();

  // Posted now; the work's wait waits for the transfer (a wait that runs out
  // of time ends it). Throws Gloo's IoException when the connection is gone.
  c10::intrusive_ptr<c10d::Work> send(const at::Tensor& tensor, int dst, int tag);
  c10::intrusive_ptr<c10d::Work> recv(const at::Tensor& tensor, int src, int tag);

 private:
  class Transfer;
  // The tag of the next collective: the ranks count their collectives alike.
  uint32_t next_tag() { return next_tag_++; }

  std::shared_ptr<::gloo::rendezvous::Context> context_;
  std::chrono::milliseconds timeout_;
  uint32_t next_tag_ = 0;
  // Last: its thread runs the collectives on the context, so it stops first.
  CallQueue queue_;
};

}  // namespace engine::dist::gloo
