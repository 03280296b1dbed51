#include "engine/dist/backend_registry.h"

#include <map>
#include <mutex>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory> factories;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "(none)" : out;
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  if (!registry().factories.emplace(name, std::move(factory)).second) {
    throw InvalidArgument("backend '" + name +
                          "' is registered twice: give each backend its own name");
  }
}

std::shared_ptr<Backend> create_backend(const std::string& name, const BackendOptions& options) {
  BackendFactory factory;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    const auto it = registry().factories.find(name);
    if (it != registry().factories.end()) factory = it->second;
  }
  if (!factory) {
    throw InvalidArgument(on_rank(
        options.rank,
        "unknown backend '" + name + "'; available in this binary: " + join(available_backends())));
  }
  return factory(options);
}

std::vector<std::string> available_backends() {
  std::lock_guard<std::mutex> lock(registry().mutex);
  std::vector<std::string> names;
  for (const auto& entry : registry().factories) names.push_back(entry.first);
  return names;
}

}  // namespace engine::dist
