// engine-store: hosts a job's store apart from its launchers, for
// engine-launch --store external, so that the job can lose any node, node 0
// included (as torchrun's c10d rendezvous cannot; etcd is its answer).
//   engine-store --port PORT
// It serves what engine-launch's node 0 would (job_store.h: LibTorch 1.x's
// protocol through StoreServer, or 2.x's own server) on every interface
// until SIGINT or SIGTERM, then exits 0. Run it where it outlives the nodes
// (a login node, say) and give every launcher --master-addr its host and
// --master-port PORT.
#include <signal.h>

#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/launch/job_store.h"
#include "tools/launch/launch_plan.h"

namespace {

int port_from(const std::vector<std::string>& args) {
  const std::optional<int> port =
      args.size() == 2 && args[0] == "--port" ? launch::port_number(args[1]) : std::nullopt;
  if (!port) throw std::invalid_argument("usage: engine-store --port PORT (1-65535)");
  return *port;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    launch::Plan plan;
    plan.master_port = port_from(std::vector<std::string>(argv + 1, argv + argc));
    // Signals wait for sigwait, in every thread the store starts.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    const launch::JobStore store(plan);
    std::fprintf(stderr, "engine-store: serving the job's store on port %d\n", plan.master_port);
    int signal_number = 0;
    sigwait(&stop, &signal_number);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "engine-store: %s\n", error.what());
    return 2;
  }
}
