// SyncBatchNorm over N ranks (the world or any subgroup, the other ranks
// busy with collectives of their own) equals BatchNorm over the members'
// concatenated batch: outputs, running statistics, input gradients and
// (summed) weight and bias gradients; convert/revert keep state and the
// train/eval flag.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>

#include "engine/dist/errors.h"
#include "engine/model/batch_norm.h"
#include "testing/cases.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace {

using engine::model::BatchNorm;
using engine::model::BatchNormOptions;

struct NormCase {
  int world_size = 1;
  std::vector<int> members;  // the group's global ranks, sorted
  int64_t channels = 1;
  std::vector<int64_t> spatial;  // 0-2 trailing dimensions
  std::vector<int64_t> batches;  // per member; some may be 0
  bool affine = true;
  // Converted before any group exists (mmengine allows it) rather than on
  // the rank once initialised: on the whole world only.
  bool convert_before_init = false;
  uint64_t seed = 0;
};

void showValue(const NormCase& c, std::ostream& os) {
  os << "world_size=" << c.world_size << " members=[";
  for (int m : c.members) os << m << ",";
  os << "] channels=" << c.channels << " spatial=[";
  for (int64_t s : c.spatial) os << s << ",";
  os << "] batches=[";
  for (int64_t b : c.batches) os << b << ",";
  os << "] affine=" << c.affine << " convert_before_init=" << c.convert_before_init
     << " seed=" << c.seed;
}

int64_t per_channel_count(const NormCase& c) {
  int64_t count = 0;
  for (int64_t b : c.batches) count += b;
  for (int64_t s : c.spatial) count *= s;
  return count;
}

rc::Gen<NormCase> norm_case() {
  return rc::gen::suchThat(rc::gen::exec([] {
                             NormCase c;
                             c.world_size = *rc::gen::inRange(1, 6);
                             c.members = *cases::world_or_subgroup(c.world_size);
                             c.channels = *rc::gen::inRange<int64_t>(1, 5);
                             c.spatial = *rc::gen::container<std::vector<int64_t>>(
                                 *rc::gen::inRange<size_t>(0, 3), rc::gen::inRange<int64_t>(1, 4));
                             c.batches = *rc::gen::container<std::vector<int64_t>>(
                                 c.members.size(), rc::gen::inRange<int64_t>(0, 4));
                             c.affine = *rc::gen::arbitrary<bool>();
                             c.convert_before_init =
                                 static_cast<int>(c.members.size()) == c.world_size &&
                                 *rc::gen::arbitrary<bool>();
                             c.seed = *rc::gen::arbitrary<uint32_t>();
                             return c;
                           }),
                           [](const NormCase& c) { return per_channel_count(c) > 1; });
}

struct Outcome {
  at::Tensor output, grad_input, grad_weight, grad_bias, running_mean, running_var;
};

at::Tensor shaped(const NormCase& c, int64_t batch, at::Generator& generator) {
  std::vector<int64_t> shape{batch, c.channels};
  shape.insert(shape.end(), c.spatial.begin(), c.spatial.end());
  return at::randn(shape, generator, at::kDouble) * 3 + 1;
}

Outcome run_norm(BatchNorm& norm, const at::Tensor& input, const at::Tensor& coefficients) {
  at::Tensor x = input.clone().requires_grad_(true);
  at::Tensor output = norm->forward(x);
  (output * coefficients).sum().backward();
  Outcome outcome{
      output.detach(),          x.grad(), at::Tensor(), at::Tensor(), norm->running_mean.clone(),
      norm->running_var.clone()};
  if (norm->options().affine) {
    outcome.grad_weight = norm->weight.grad();
    outcome.grad_bias = norm->bias.grad();
  }
  return outcome;
}

BatchNorm make_norm(const NormCase& c) {
  BatchNormOptions options(c.channels);
  options.affine = c.affine;
  BatchNorm norm(options);
  norm->to(torch::kDouble);
  if (c.affine) {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(torch::linspace(0.5, 2, c.channels, torch::kDouble));
    norm->bias.copy_(torch::linspace(-1, 1, c.channels, torch::kDouble));
  }
  return norm;
}

bool close(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && torch::allclose(a, b, 1e-9, 1e-9);
}

HARNESS_PROP(SyncBatchNorm, EqualsBatchNormOverTheConcatenatedBatch, ()) {
  const NormCase c = *norm_case();
  auto generator = at::make_generator<at::CPUGeneratorImpl>(c.seed);
  std::vector<at::Tensor> inputs, coefficients;
  for (int64_t b : c.batches) {
    inputs.push_back(shaped(c, b, generator));
    coefficients.push_back(shaped(c, b, generator));
  }
  BatchNorm serial = make_norm(c);
  const Outcome expected = run_norm(serial, torch::cat(inputs), torch::cat(coefficients));

  std::vector<BatchNorm> converted_early;
  for (int rank = 0; c.convert_before_init && rank < c.world_size; ++rank) {
    converted_early.push_back(make_norm(c));
    engine::model::convert_sync_batchnorm(*converted_early.back());
  }
  const auto per_rank = harness::collect_ranks<Outcome>(
      c.world_size,
      [&](int rank) {
        const auto split = cases::split_world(c.world_size, c.members);
        Outcome outcome;
        const int seat = cases::seat_of(c.members, rank);
        if (seat >= 0) {
          BatchNorm norm = c.convert_before_init ? converted_early[rank] : make_norm(c);
          if (!c.convert_before_init) engine::model::convert_sync_batchnorm(*norm, split.members);
          outcome = run_norm(norm, inputs[seat], coefficients[seat]);
        }
        cases::keep_busy(split.others);
        return outcome;
      },
      harness::test_options(c.seed));
  std::vector<Outcome> outcomes;
  for (const int member : c.members) outcomes.push_back(per_rank[member]);

  std::vector<at::Tensor> outputs, grad_inputs;
  at::Tensor grad_weight, grad_bias;
  for (const auto& outcome : outcomes) {
    outputs.push_back(outcome.output);
    grad_inputs.push_back(outcome.grad_input);
    RC_ASSERT(torch::equal(outcome.running_mean, outcomes[0].running_mean));
    RC_ASSERT(torch::equal(outcome.running_var, outcomes[0].running_var));
    if (!c.affine) continue;
    grad_weight = grad_weight.defined() ? grad_weight + outcome.grad_weight : outcome.grad_weight;
    grad_bias = grad_bias.defined() ? grad_bias + outcome.grad_bias : outcome.grad_bias;
  }
  RC_ASSERT(close(torch::cat(outputs), expected.output));
  RC_ASSERT(close(torch::cat(grad_inputs), expected.grad_input));
  RC_ASSERT(close(outcomes[0].running_mean, expected.running_mean));
  RC_ASSERT(close(outcomes[0].running_var, expected.running_var));
  if (c.affine) {
    RC_ASSERT(close(grad_weight, expected.grad_weight));
    RC_ASSERT(close(grad_bias, expected.grad_bias));
  }
}

TEST(SyncBatchNorm, ConvertAndRevertKeepStateAndTheTrainFlag) {
  harness::run_ranks(2, [](int rank) {
    torch::nn::Sequential model(BatchNorm(BatchNormOptions(3)), torch::nn::ReLU(),
                                BatchNorm(BatchNormOptions(3)));
    model[0]->eval();
    auto weight = model[2]->named_parameters()["weight"];
    EXPECT_EQ(engine::model::convert_sync_batchnorm(*model), 2);
    EXPECT_TRUE(model[0]->as<BatchNorm>()->is_sync());
    EXPECT_FALSE(model[0]->is_training());
    EXPECT_TRUE(model[2]->is_training());
    EXPECT_TRUE(model[2]->named_parameters()["weight"].is_same(weight));
    EXPECT_EQ(engine::model::revert_sync_batchnorm(*model), 2);
    EXPECT_FALSE(model[2]->as<BatchNorm>()->is_sync());
    EXPECT_FALSE(model[0]->is_training());
  });
}

TEST(SyncBatchNorm, ConvertedBeforeInitStaysLocalWhileNoGroupExists) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor input = at::randn({4, 3}, generator, at::kDouble);
  BatchNorm local(BatchNormOptions(3)), converted(BatchNormOptions(3));
  local->to(torch::kDouble);
  converted->to(torch::kDouble);
  engine::model::convert_sync_batchnorm(*converted);
  EXPECT_TRUE(converted->is_sync());
  EXPECT_EQ(converted->sync_group(), nullptr);
  EXPECT_TRUE(torch::equal(converted->forward(input), local->forward(input)));
  EXPECT_TRUE(torch::equal(converted->running_var, local->running_var));
}

TEST(SyncBatchNorm, StockBatchNormLayersAreNamedInTheError) {
  torch::nn::Sequential model(torch::nn::Linear(2, 3), torch::nn::BatchNorm1d(3));
  try {
    engine::model::convert_sync_batchnorm(*model);
    FAIL() << "no error";
  } catch (const engine::dist::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("(1)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("engine::model::BatchNorm"), std::string::npos);
  }
}

}  // namespace
