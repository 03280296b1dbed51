#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "engine/dist/backend_registry.h"

namespace engine::dist {

// The rendezvous of the TCP backends (gloo, nccl): c10d's TCPStore, hosted by
// rank 0 at options.master_addr:options.master_port, or joined under a prefix
// when the launcher hosts it (options.agent_store_prefix). Throws
// InvalidArgument without a master address, and before connecting when the
// launcher's LibTorch (options.store_libtorch) has another major version
// than this process's: 1.x and 2.x speak different store protocols, and a
// client would retry until its timeout.
c10::intrusive_ptr<c10d::Store> make_tcp_store(const BackendOptions& options, const char* backend);

}  // namespace engine::dist
