#include "engine/dist/backend_registry.h"

#include <gtest/gtest.h>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

TEST(BackendRegistry, UnknownNameListsTheAvailableBackends) {
  register_backend("fake_for_registry_test", [](const BackendOptions&) { return nullptr; });
  try {
    create_backend("nccl_missing", BackendOptions{2, 4});
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[rank 2] unknown backend 'nccl_missing'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("fake_for_registry_test"), std::string::npos) << message;
  }
}

TEST(BackendRegistry, CreatesByNameWithTheOptions) {
  int seen_rank = -1;
  register_backend("fake_recording", [&](const BackendOptions& options) {
    seen_rank = options.rank;
    return nullptr;
  });
  create_backend("fake_recording", BackendOptions{5, 8});
  EXPECT_EQ(seen_rank, 5);
}

TEST(BackendRegistry, ANameCanBeRegisteredOnce) {
  register_backend("fake_once", [](const BackendOptions&) { return nullptr; });
  EXPECT_THROW(register_backend("fake_once", [](const BackendOptions&) { return nullptr; }),
               InvalidArgument);
}

}  // namespace
}  // namespace engine::dist
