#include "engine/dist/backends/store/tcp_store.h"

#include <gtest/gtest.h>
#include <torch/version.h>

#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

// A store hosted as engine-launch hosts it: the ranks join it as clients.
struct LauncherStore {
  LauncherStore() {
    c10d::TCPStoreOptions options;
    options.port = 0;
    options.isServer = true;
    options.waitWorkers = false;
    store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  }
  BackendOptions rank_options(const std::string& libtorch) const {
    BackendOptions options;
    options.rank = 3;
    options.world_size = 4;
    options.master_addr = "127.0.0.1";
    options.master_port = static_cast<int>(store->getPort());
    options.agent_store_prefix = "/worker/attempt_0";
    options.store_libtorch = libtorch;
    options.timeout = std::chrono::seconds(10);
    return options;
  }
  c10::intrusive_ptr<c10d::TCPStore> store;
};

const std::string kMajor = std::to_string(TORCH_VERSION_MAJOR);

TEST(TcpStore, JoinsALaunchersStoreOfTheSameMajorVersion) {
  const LauncherStore launcher;
  auto store = make_tcp_store(launcher.rank_options(kMajor + ".99"), "gloo");
  store->set("key", std::vector<uint8_t>{1, 2});
  EXPECT_EQ(launcher.store->get("/worker/attempt_0/key"), (std::vector<uint8_t>{1, 2}));
}

TEST(TcpStore, RefusesALaunchersStoreOfAnotherMajorVersionBeforeConnecting) {
  const LauncherStore launcher;
  const std::string other = std::to_string(TORCH_VERSION_MAJOR + 1) + ".0";
  try {
    make_tcp_store(launcher.rank_options(other), "gloo");
    FAIL() << "joined a store of LibTorch " << other;
  } catch (const InvalidArgument& error) {
    const std::string what = error.what();
    EXPECT_EQ(what.rfind("[rank 3] ", 0), 0u) << what;
    EXPECT_NE(what.find("LibTorch " + other), std::string::npos) << what;
    EXPECT_NE(what.find("Build engine-launch against this process's LibTorch"), std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace engine::dist
