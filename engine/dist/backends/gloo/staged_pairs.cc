#include "engine/dist/backends/gloo/staged_pairs.h"

#include <utility>

namespace engine::dist::gloo {

StagedPairs::StagedPairs(std::shared_ptr<::gloo::Context> context,
                         std::unique_ptr<shm::StagingArea> area, ReadMode& read_mode)
    : context_(std::move(context)),
      area_(std::move(area)),
      read_mode_(read_mode),
      heard_(static_cast<size_t>(context_->size)) {
  const int slot = context_->nextSlot();
  for (int peer = 0; peer < context_->size; ++peer) {
    if (peer == context_->rank) continue;
    auto& pair = context_->getPair(peer);
    to_peers_.push_back(pair->createSendBuffer(slot, &word_, 1));
    from_peers_.push_back(pair->createRecvBuffer(slot, &heard_[peer], 1));
  }
}

void StagedPairs::run(const shm::StagedTransfer& transfer) {
  for (int64_t chunk = 0; chunk < transfer.chunks(); ++chunk) {
    transfer.stage(chunk);
    tell_peers();
    hear_peers();
    transfer.consume(chunk);
  }
}

void StagedPairs::tell_peers() {
  for (auto& peer : to_peers_) {
    peer->send(0, 1, 0);
    peer->waitSend();
  }
}

void StagedPairs::hear_peers() {
  for (auto& peer : from_peers_) {
    read_mode_.refresh();
    peer->waitRecv();
  }
}

}  // namespace engine::dist::gloo
