// engine-launch: a torchrun-style launcher for one node's ranks.
//   engine-launch --nproc-per-node 4 [--nnodes N --node-rank R --master-addr HOST
//                 --master-port PORT] [--grace-seconds S] [--max-restarts N]
//                 [--] PROGRAM [ARGS...]
#include <cstdio>
#include <stdexcept>

#include "tools/launch/launch_plan.h"
#include "tools/launch/supervisor.h"

int main(int argc, char** argv) {
  try {
    return launch::supervise_with_restarts(
        launch::parse_plan(std::vector<std::string>(argv + 1, argv + argc)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine-launch: %s\n", e.what());
    return 2;
  }
}
