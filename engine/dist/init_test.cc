#include "engine/dist/init.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"

namespace engine::dist {
namespace {

std::string error_of(const std::string& launcher, const std::string& backend) {
  try {
    init_dist(launcher, backend);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(InitDist, UnknownLauncherIsRefused) {
  EXPECT_NE(error_of("torchrun", "gloo").find("launcher must be pytorch, mpi or slurm"),
            std::string::npos);
}

TEST(InitDist, ABackendNotBuiltInListsTheAvailableOnes) {
  setenv("WORLD_SIZE", "1", 1);
  setenv("RANK", "0", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  // ucc: a backend of c10d's that the engine has none of, in any build.
  const std::string message = error_of("pytorch", "ucc");
  EXPECT_NE(message.find("unknown backend 'ucc'; available in this binary: "), std::string::npos)
      << message;
  EXPECT_FALSE(is_distributed());
}

TEST(InitDist, BadEnvironmentNamesTheVariable) {
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "2", 1);
  EXPECT_NE(error_of("pytorch", "gloo").find("RANK=2 must be below WORLD_SIZE=2"),
            std::string::npos);
}

}  // namespace
}  // namespace engine::dist
