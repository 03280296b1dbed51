// OptimWrapper's accumulation, scaling, clipping and state, and parse_losses.
#include "engine/optim/optim_wrapper.h"

#include <gtest/gtest.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <optional>

#include "engine/dist/errors.h"
#include "engine/model/base_model.h"
#include "testing/cases.h"
#include "testing/harness.h"

namespace {

using engine::optim::ClipGrad;
using engine::optim::OptimWrapper;

struct Quadratic {
  at::Tensor weight = torch::zeros({2}, torch::kDouble).requires_grad_(true);
  std::shared_ptr<torch::optim::SGD> sgd =
      std::make_shared<torch::optim::SGD>(std::vector<at::Tensor>{weight}, 1.0);
  // d/dweight = (1, 2) * scale
  at::Tensor loss(double scale) {
    return (weight * torch::tensor({1.0, 2.0}, torch::kDouble)).sum() * scale;
  }
};

TEST(OptimWrapper, AccumulatesAndStepsEveryCountsCallsWithTheLastGroupScaledByItsSize) {
  Quadratic q;
  OptimWrapper optim(q.sgd, {2, std::nullopt});
  optim.initialize_count_status(0, 3);
  EXPECT_FALSE(optim.should_sync());
  optim.update_params(q.loss(1));  // scaled by 1/2, no step
  EXPECT_TRUE(torch::equal(q.weight, torch::zeros({2}, torch::kDouble)));
  EXPECT_TRUE(optim.should_sync());
  optim.update_params(q.loss(3));  // (1 + 3) / 2 = 2 -> step
  EXPECT_TRUE(torch::allclose(q.weight, torch::tensor({-2.0, -4.0}, torch::kDouble)));
  EXPECT_FALSE(q.weight.grad().any().item<bool>()) << "zero_grad after the step";
  EXPECT_TRUE(optim.should_sync()) << "the last, partial group syncs at once";
  optim.update_params(q.loss(5));  // a group of 1: not divided
  EXPECT_TRUE(torch::allclose(q.weight, torch::tensor({-7.0, -14.0}, torch::kDouble)));
}

TEST(OptimWrapper, ClipsByNormAndByValue) {
  Quadratic by_norm, by_value;
  OptimWrapper norm(by_norm.sgd, {1, ClipGrad{ClipGrad::Kind::kNorm, 1.0, 2.0, 0}});
  OptimWrapper value(by_value.sgd, {1, ClipGrad{ClipGrad::Kind::kValue, 0, 0, 1.5}});
  norm.update_params(by_norm.loss(1));
  value.update_params(by_value.loss(1));
  const double n = std::sqrt(5.0);
  EXPECT_TRUE(
      torch::allclose(by_norm.weight, torch::tensor({-1 / n, -2 / n}, torch::kDouble), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(by_value.weight, torch::tensor({-1.0, -1.5}, torch::kDouble)));
}

TEST(OptimWrapper, StateRoundTripsThroughAnArchive) {
  Quadratic first, second;
  auto momentum = [](Quadratic& q) {
    q.sgd = std::make_shared<torch::optim::SGD>(std::vector<at::Tensor>{q.weight},
                                                torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  momentum(first);
  momentum(second);
  OptimWrapper a(first.sgd), b(second.sgd);
  a.update_params(first.loss(1));
  torch::serialize::OutputArchive out;
  a.save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  b.load(in);
  {
    torch::NoGradGuard no_grad;
    second.weight.copy_(first.weight);
  }
  a.update_params(first.loss(1));
  b.update_params(second.loss(1));
  EXPECT_TRUE(torch::equal(first.weight, second.weight)) << "momentum buffers restored";
}

TEST(OptimWrapper, RejectsAccumulativeCountsBelowOne) {
  Quadratic q;
  EXPECT_THROW(OptimWrapper(q.sgd, {0, std::nullopt}), engine::dist::InvalidArgument);
}

TEST(ParseLosses, SumsTheLossEntriesAndAveragesTheLogValuesAcrossRanks) {
  std::vector<engine::model::ParsedLosses> parsed(2);
  harness::run_ranks(2, [&](int rank) {
    const double r = rank;
    parsed[rank] = engine::model::parse_losses(
        {{"loss_cls", torch::tensor({1.0 + r, 3.0 + r}, torch::kDouble)},
         {"loss_box", torch::tensor({4.0}, torch::kDouble)},
         {"accuracy", torch::tensor({0.5 + r}, torch::kDouble)}});
  });
  EXPECT_DOUBLE_EQ(parsed[0].loss.item<double>(), 2 + 4);  // local: not averaged
  EXPECT_DOUBLE_EQ(parsed[1].loss.item<double>(), 3 + 4);
  for (const auto& p : parsed) {
    EXPECT_DOUBLE_EQ(p.log_vars.at("loss").item<double>(), 6.5);
    EXPECT_DOUBLE_EQ(p.log_vars.at("loss_cls").item<double>(), 2.5);
    EXPECT_DOUBLE_EQ(p.log_vars.at("accuracy").item<double>(), 1.0);
  }
  EXPECT_THROW(engine::model::parse_losses({{"accuracy", torch::ones({1})}}),
               engine::dist::InvalidArgument);
}

// On a group without rank 0 and with a gap, the log values average over its
// members only, while the other ranks run collectives of their own.
TEST(ParseLosses, AveragesOverItsGroupOnly) {
  const std::vector<int> members = {1, 3};
  std::vector<std::optional<engine::model::ParsedLosses>> parsed(4);
  harness::run_ranks(4, [&](int rank) {
    const auto split = cases::split_world(4, members);
    if (rank % 2 == 1) {
      parsed[rank] = engine::model::parse_losses(
          {{"loss", torch::tensor({double(rank)}, torch::kDouble)}}, split.members);
    }
    cases::keep_busy(split.others);
  });
  for (const int rank : members) {
    EXPECT_DOUBLE_EQ(parsed[rank]->loss.item<double>(), rank);
    EXPECT_DOUBLE_EQ(parsed[rank]->log_vars.at("loss").item<double>(), 2.0);
  }
}

}  // namespace
