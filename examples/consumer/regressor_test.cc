// The team's own tests, on dist-engine's simulator: four ranks are four
// threads of this test, no launcher needed.
#include "regressor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/world.h"
#include "testing/harness.h"

namespace consumer {
namespace {

constexpr int kWorld = 4;
constexpr int kSteps = 3;
constexpr int64_t kPerRank = 5;

// batches[rank][step]: each rank's own data.
std::vector<std::vector<TensorDict>> rank_batches() {
  std::vector<std::vector<TensorDict>> batches(kWorld);
  for (int rank = 0; rank < kWorld; ++rank) {
    for (int step = 0; step < kSteps; ++step) {
      batches[rank].push_back(make_batch(kPerRank, 3, 100 * step + rank));
    }
  }
  return batches;
}

TEST(Regressor, FourSimulatedRanksTrainLikeOneProcessOnTheConcatenatedBatch) {
  const auto batches = rank_batches();
  std::vector<TensorDict> concatenated;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<at::Tensor> inputs, targets;
    for (const auto& mine : batches) {
      inputs.push_back(mine[step].at("input"));
      targets.push_back(mine[step].at("target"));
    }
    concatenated.push_back({{"input", at::cat(inputs)}, {"target", at::cat(targets)}});
  }
  auto reference = std::make_shared<Regressor>(3, 1);
  const auto reference_losses = train(reference, concatenated, 0.1);

  const auto trained = harness::collect_ranks<std::vector<at::Tensor>>(kWorld, [&](int rank) {
    auto model = std::make_shared<Regressor>(3, 1);
    const auto losses = train(model, batches[rank], 0.1);
    // The logged loss is the ranks' mean: with equal batches, the reference's.
    EXPECT_NEAR(losses.back(), reference_losses.back(), 1e-12);
    return std::vector<at::Tensor>{model->weight.detach(), model->bias.detach()};
  });
  // Float64 and a few steps: only the order of the gradient sums differs
  // from the reference, so agreement is far below 1e-12.
  EXPECT_TRUE(at::allclose(trained[0][0], reference->weight.detach(), 0, 1e-12));
  EXPECT_TRUE(at::allclose(trained[0][1], reference->bias.detach(), 0, 1e-12));
  EXPECT_FALSE(at::equal(trained[0][0], at::zeros_like(trained[0][0])));
  for (int rank = 1; rank < kWorld; ++rank) {
    EXPECT_TRUE(at::equal(trained[rank][0], trained[0][0])) << "rank " << rank;
    EXPECT_TRUE(at::equal(trained[rank][1], trained[0][1])) << "rank " << rank;
  }
}

TEST(Regressor, ARankThatCrashesStopsTheOthersWithAnErrorNamingIt) {
  const auto batches = rank_batches();
  sim::WorldOptions options = harness::test_options();
  options.faults = sim::FaultPlan::parse("crash:2@4");
  options.virtual_time = true;
  const auto outcome = sim::World(kWorld, options).run_all([&](int rank) {
    auto model = std::make_shared<Regressor>(3, 1);
    train(model, batches[rank], 0.1);
  });
  EXPECT_STREQ(sim::error_kind(outcome.root_cause), "InjectedCrash");
  for (int rank : {0, 1, 3}) {
    EXPECT_STREQ(sim::error_kind(outcome.errors[rank]), "PeerFailure");
    const std::string message = sim::error_message(outcome.errors[rank]);
    EXPECT_NE(message.find("rank 2 failed"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace consumer
