#pragma once

#include <gloo/context.h>
#include <gloo/transport/buffer.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/dist/backends/gloo/read_mode.h"
#include "engine/dist/shm/staging.h"

namespace engine::dist::gloo {

// reduce_scatter and all_gather through a shm::StagingArea (engine/dist/shm/staging.h)
// for ranks on one machine, with one-byte messages on the pairs of a Gloo
// context in synchronous mode as the words that chunks are staged.
//
// Why: a chunk that travels through a socket is copied twice by the kernel
// and costs a system call on each side; through the area it is copied once
// in user space on each side.
//
// The messages cannot block a write: a rank writes at most one word per
// chunk to each peer and reads every peer's word for that chunk before it
// writes the next, so at most two unread words wait on a connection.
//
// Every rank must run the same transfers in the same order on one thread
// (PairCollectives' serving thread): the slot is fixed and each transfer
// reads exactly the words its peers wrote for it. The context is kept
// because the word buffers live on its pairs.
class StagedPairs {
 public:
  // Takes a slot of `context` for the words (every rank in the same order);
  // `area` is this context's ranks'. Refreshes `read_mode` before each word
  // it reads.
  StagedPairs(std::shared_ptr<::gloo::Context> context, std::unique_ptr<shm::StagingArea> area,
              ReadMode& read_mode);

  shm::StagingArea& area() { return *area_; }

  // Runs `transfer`, chunk by chunk, to the end; a silent peer ends it with
  // Gloo's IoException once the context's timeout has passed.
  void run(const shm::StagedTransfer& transfer);

 private:
  void tell_peers();
  void hear_peers();

  std::shared_ptr<::gloo::Context> context_;
  std::unique_ptr<shm::StagingArea> area_;
  ReadMode& read_mode_;
  char word_ = 1;
  std::vector<char> heard_;  // by peer
  std::vector<std::unique_ptr<::gloo::transport::Buffer>> to_peers_;
  std::vector<std::unique_ptr<::gloo::transport::Buffer>> from_peers_;
};

}  // namespace engine::dist::gloo
