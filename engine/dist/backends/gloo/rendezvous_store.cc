#include "engine/dist/backends/gloo/rendezvous_store.h"

#include <cstdint>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <utility>

namespace engine::dist::gloo {

RendezvousStore::RendezvousStore(c10::intrusive_ptr<c10d::Store> store, const std::string& prefix)
    : store_(c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(store))) {}

void RendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
}

std::vector<char> RendezvousStore::get(const std::string& key) {
  const std::vector<uint8_t> value = store_->get(key);
  return std::vector<char>(value.begin(), value.end());
}

void RendezvousStore::wait(const std::vector<std::string>& keys) { store_->wait(keys); }

void RendezvousStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace engine::dist::gloo
