#pragma once

#include <mutex>
#include <unordered_map>

namespace engine::registry {

// What a wrapper attaches to objects it does not own (a module, a
// parameter), looked up by the object's address. Meant for a function-local
// static: process-wide, since simulated ranks are threads of one process,
// each attaching to objects of its own. Thread-safe.
template <typename Key, typename Target>
class Attachments {
 public:
  void attach(const Key* key, Target* target) {
    std::lock_guard<std::mutex> lock(mutex_);
    targets_[key] = target;
  }
  void detach(const Key* key) {
    std::lock_guard<std::mutex> lock(mutex_);
    targets_.erase(key);
  }
  // nullptr when nothing is attached to `key`.
  Target* find(const Key* key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = targets_.find(key);
    return it == targets_.end() ? nullptr : it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const Key*, Target*> targets_;
};

}  // namespace engine::registry
