// The team's test on dist-engine's simulator, as a CMake project builds it:
// four ranks are four threads of this test.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "regressor.h"
#include "sim/world.h"

namespace consumer {
namespace {

constexpr int kWorld = 4;

std::vector<TensorDict> batches_of(int rank) {
  std::vector<TensorDict> batches;
  for (int step = 0; step < 4; ++step) batches.push_back(make_batch(8, 3, 10 * step + rank));
  return batches;
}

TEST(RegressorOnTheSimulator, RanksWithDifferentDataEndWithTheSameParameters) {
  std::vector<at::Tensor> weights(kWorld);
  std::vector<double> last_losses(kWorld);
  sim::World(kWorld).run([&](int rank) {
    auto model = std::make_shared<Regressor>(3, 1);
    last_losses[rank] = train(model, batches_of(rank), 0.1).back();
    weights[rank] = model->weight.detach().clone();
  });
  EXPECT_FALSE(at::equal(weights[0], at::zeros_like(weights[0])));
  for (int rank = 1; rank < kWorld; ++rank) {
    EXPECT_TRUE(at::equal(weights[rank], weights[0])) << "rank " << rank;
    EXPECT_EQ(last_losses[rank], last_losses[0]) << "rank " << rank;  // logged as the mean
  }
}

TEST(RegressorOnTheSimulator, ARankThatNeverCallsAgainTimesTheOthersOutNamingIt) {
  sim::WorldOptions options;
  options.faults = sim::FaultPlan::parse("never:1@3");
  options.virtual_time = true;  // the 60 s timeout takes no wall time
  const auto outcome = sim::World(kWorld, options).run_all([&](int rank) {
    train(std::make_shared<Regressor>(3, 1), batches_of(rank), 0.1);
  });
  EXPECT_STREQ(sim::error_kind(outcome.errors[1]), "InjectedHang");
  for (int rank : {0, 2, 3}) {
    ASSERT_STREQ(sim::error_kind(outcome.errors[rank]), "Timeout") << "rank " << rank;
    const std::string message = sim::error_message(outcome.errors[rank]);
    EXPECT_NE(message.find("waiting for rank(s) 1:"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace consumer
