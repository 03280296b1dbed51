// The simulator runs ranks as threads of one process, so every suite relies
// on LibTorch giving the same results when threads compute at once. Debian's
// serial OpenBLAS does not (about 1 concurrent backward in 2000 got wrong
// gradients): tools/setup.sh installs the thread-safe pthread build, and this
// test fails if the BLAS in use is not safe.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/types.h>

#include <atomic>
#include <thread>

#include "testing/model/nets.h"

namespace {

TEST(ConcurrentOps, BackwardsInSeveralThreadsGiveTheSerialGradients) {
  at::set_num_threads(1);
  nets::NetSpec spec;
  spec.trunk = {5, 3};
  auto reference = nets::make_net(spec);
  const auto data = nets::make_batch(spec, 3, 100, {true});
  reference->forward(data, engine::model::ForwardMode::kLoss).at("loss").backward();
  auto expected = reference->named_parameters();

  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 3000; ++i) {
        auto net = nets::make_net(spec);
        nets::copy_state(*reference, *net);
        net->forward(data, engine::model::ForwardMode::kLoss).at("loss").backward();
        for (const auto& item : net->named_parameters()) {
          if (!torch::equal(item.value().grad(), expected[item.key()].grad())) {
            ++wrong;
            break;
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0) << "backwards computed at once in several threads gave wrong "
                                "gradients: the BLAS library is not thread-safe (bash "
                                "tools/setup.sh installs libopenblas0-pthread)";
}

}  // namespace
