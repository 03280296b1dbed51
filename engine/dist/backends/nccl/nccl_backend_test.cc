// What can be checked of the nccl backend on any machine: it is registered
// exactly when built with --config=cuda, and without a GPU creating it fails
// with an error that says so.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/dist/backend_registry.h"
#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

bool registered(const std::string& name) {
  const auto names = available_backends();
  return std::find(names.begin(), names.end(), name) != names.end();
}

#ifdef ENGINE_WITH_CUDA
TEST(NcclBackend, IsRegisteredAndNeedsAGpu) {
  ASSERT_TRUE(registered("nccl"));
  BackendOptions options;
  options.master_addr = "127.0.0.1";
  try {
    create_backend("nccl", options);
    SUCCEED() << "a GPU is present: the backend was created";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a CUDA device"), std::string::npos) << e.what();
  }
}
#else
TEST(NcclBackend, IsNotBuiltWithoutCudaAndSaysSo) {
  EXPECT_FALSE(registered("nccl"));
  try {
    create_backend("nccl", BackendOptions{});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend 'nccl'"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace engine::dist
