// Trains the regressor alone or, under mpirun or a torchrun-style launcher,
// in every process of the job (gloo under the pytorch launcher).
#include <cstdio>
#include <cstdlib>

#include "engine/dist/info.h"
#include "engine/dist/init.h"
#include "engine/launch/launch.h"
#include "regressor.h"

int main() {
  const std::string launcher = engine::dist::infer_launcher(engine::dist::process_environment());
  if (launcher != "none") engine::dist::init_dist(launcher, launcher == "mpi" ? "mpi" : "gloo");
  const int rank = engine::dist::get_rank();
  std::vector<consumer::TensorDict> batches;
  for (int step = 0; step < 50; ++step)
    batches.push_back(consumer::make_batch(16, 3, 1000 * step + rank));
  auto model = std::make_shared<consumer::Regressor>(3, 1);
  const auto losses = consumer::train(model, batches, 0.05);
  if (engine::dist::is_main_process()) {
    std::printf("loss %.4f after 1 step, %.4f after %zu\n", losses.front(), losses.back(),
                losses.size());
  }
  return 0;
}
