#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace engine::dist::gloo {

// Gloo's rendezvous store over a c10d store (the job's TCPStore), under a
// key prefix of the caller's, so that each Gloo context connects through
// keys of its own.
class RendezvousStore : public ::gloo::rendezvous::Store {
 public:
  RendezvousStore(c10::intrusive_ptr<c10d::Store> store, const std::string& prefix);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace engine::dist::gloo
