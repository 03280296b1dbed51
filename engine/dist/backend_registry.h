#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/dist/backend.h"

namespace engine::dist {

// What a backend needs to connect one process to the others.
struct BackendOptions {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // picks the rank's GPU (nccl: LOCAL_RANK modulo the GPUs)
  int local_world_size = 1;  // ranks on this machine
  std::string master_addr;   // rendezvous host (rank 0 hosts the store there)
  int master_port = 29500;   // mmengine/torchrun default
  // Non-empty: a launcher hosts the store; join it under this key prefix
  // (LaunchSpec::agent_store_prefix).
  std::string agent_store_prefix;
  // The launcher's LibTorch, "MAJOR.MINOR" (LaunchSpec::store_libtorch);
  // empty when unknown.
  std::string store_libtorch;
  std::chrono::milliseconds timeout = std::chrono::minutes(30);  // torch.distributed default
};

using BackendFactory = std::function<std::shared_ptr<Backend>(const BackendOptions&)>;

// Backends plug in by name; engine/dist knows none of them. Registering a
// name twice throws InvalidArgument. Thread-safe.
void register_backend(const std::string& name, BackendFactory factory);

// Throws InvalidArgument listing the available names if `name` is unknown.
std::shared_ptr<Backend> create_backend(const std::string& name, const BackendOptions& options);

// Sorted names of the backends built into this binary.
std::vector<std::string> available_backends();

// Registers a backend from a static initializer in the backend's own .cc file.
struct BackendRegistration {
  BackendRegistration(const std::string& name, BackendFactory factory) {
    register_backend(name, std::move(factory));
  }
};

}  // namespace engine::dist
