#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/registry/config.h"

namespace engine::registry {

// mmengine's Registry: builds objects of one kind from configs of the form
// {"type": "<name>", ...the type's own keys...}. Types register by name,
// usually from a static Registration in the file that defines them (link the
// target with alwayslink). Thread-safe.
template <typename Product, typename... Args>
class Registry {
 public:
  // The builder reads its keys through the reader; keys it never reads are
  // rejected after it returns.
  using Builder = std::function<Product(ConfigReader& config, Args... args)>;

  // `add_builtins` registers the types that come with the engine, so that a
  // registry returned from a function-local static is complete on first use.
  explicit Registry(std::string kind, const std::function<void(Registry&)>& add_builtins = nullptr)
      : kind_(std::move(kind)) {
    if (add_builtins) add_builtins(*this);
  }

  void add(const std::string& type, Builder builder) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!builders_.emplace(type, std::move(builder)).second) {
      throw dist::InvalidArgument(kind_ + ": the type \"" + type + "\" is registered twice");
    }
  }

  // Builds from `config`; its "type" may be left out when `default_type` is
  // given.
  Product build(const Json& config, Args... args, const std::string& default_type = "") const {
    ConfigReader reader(config, kind_);
    const auto type = reader.get<std::string>("type", default_type);
    if (type.empty()) reader.fail("lacks \"type\"; known types: " + known());
    const Builder builder = find(reader, type);
    ConfigReader body(config, kind_ + " (" + type + ")");
    body.get<std::string>("type", type);
    Product product = builder(body, std::forward<Args>(args)...);
    body.finish();
    return product;
  }

  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& entry : builders_) out.push_back(entry.first);
    return out;
  }
  const std::string& kind() const { return kind_; }

 private:
  Builder find(const ConfigReader& reader, const std::string& type) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = builders_.find(type);
    if (it == builders_.end()) {
      reader.fail("has the unknown type \"" + type + "\"; known types: " + known_locked());
    }
    return it->second;
  }
  std::string known() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return known_locked();
  }
  std::string known_locked() const {
    std::string out;
    for (const auto& entry : builders_) out += (out.empty() ? "" : ", ") + entry.first;
    return out.empty() ? "(none registered)" : out;
  }

  std::string kind_;
  mutable std::mutex mutex_;
  std::map<std::string, Builder> builders_;
};

// Registers a type from a static initializer.
template <typename RegistryT>
struct Registration {
  Registration(RegistryT& registry, const std::string& type, typename RegistryT::Builder builder) {
    registry.add(type, std::move(builder));
  }
};

}  // namespace engine::registry
