#include "engine/dist/backends/store/tcp_store.h"

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

void check_store_protocol(const BackendOptions& options) {
  const std::string& theirs = options.store_libtorch;
  if (theirs.empty()) return;
  const std::string mine =
      std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
  if (theirs.substr(0, theirs.find('.')) == std::to_string(TORCH_VERSION_MAJOR)) return;
  throw InvalidArgument(on_rank(
      options.rank,
      "engine-launch hosts this job's store with LibTorch " + theirs + ", and this process runs " +
          "LibTorch " + mine + ": their store protocols differ, so joining would only retry " +
          "until the timeout. Build engine-launch against this process's LibTorch (Bazel: " +
          "--config=torch2 for the official 2.x; or the CMake build)"));
}

}  // namespace

c10::intrusive_ptr<c10d::Store> make_tcp_store(const BackendOptions& options, const char* backend) {
  if (options.master_addr.empty()) {
    throw InvalidArgument(
        on_rank(options.rank,
                std::string("the ") + backend + " backend needs MASTER_ADDR (the host of rank 0)"));
  }
  check_store_protocol(options);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(options.master_port);
  const bool hosted_by_launcher = !options.agent_store_prefix.empty();
  store_options.isServer = options.rank == 0 && !hosted_by_launcher;
  // The launcher's store counts its own agents, not these workers.
  if (!hosted_by_launcher) store_options.numWorkers = options.world_size;
  store_options.timeout = options.timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
  if (!hosted_by_launcher) return store;
  return c10::make_intrusive<c10d::PrefixStore>(options.agent_store_prefix, std::move(store));
}

}  // namespace engine::dist
