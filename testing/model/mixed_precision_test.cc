// FSDP's mixed precision in bfloat16, exactly: where the parameters, the
// inputs, the reduction and the buffers take which dtype, shown by values
// that bfloat16 rounds; and training on every sharding strategy bit for bit
// equal to one process computing in bfloat16 on the concatenated batch,
// with inputs whose bfloat16 results are exact.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/dist/collectives.h"
#include "engine/model/batch_norm.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace {

using engine::model::ForwardMode;
using engine::model::MMFullyShardedDataParallel;
using engine::model::TensorDict;

// loss = sum(w * x): the gradient of w is the input x itself.
class DtypeRecordingDot : public engine::model::BaseModel {
 public:
  DtypeRecordingDot() { w = register_parameter("w", torch::ones({4})); }
  TensorDict forward(const TensorDict& data, ForwardMode) override {
    compute_dtype = w.scalar_type();
    for (const auto& [key, value] : data) input_dtypes[key] = value.scalar_type();
    return {{"loss", (w * data.at("x")).sum()}};
  }
  at::Tensor w;
  at::ScalarType compute_dtype = at::kFloat;
  std::map<std::string, at::ScalarType> input_dtypes;
};

// Rank r's x: 1 + r/128 in every element, exact in bfloat16 (8 significant
// bits), while the mean over 2 or 4 ranks, 1 + (ranks - 1)/256, is not.
at::Tensor dot_input(int rank) { return torch::full({4}, 1 + rank / 128.0); }
double exact_mean(int ranks) { return 1 + (ranks - 1) / 256.0; }

// This rank's shard of w's gradient after one backward.
at::Tensor dot_gradient(int rank, engine::model::MixedPrecision precision,
                        at::ScalarType* compute_dtype) {
  auto model = std::make_shared<DtypeRecordingDot>();
  engine::model::FSDPOptions options;
  options.mixed_precision = precision;
  MMFullyShardedDataParallel fsdp(model, options);
  fsdp.forward({{"x", dot_input(rank)}}, ForwardMode::kLoss).at("loss").backward();
  *compute_dtype = model->compute_dtype;
  EXPECT_EQ(model->w.scalar_type(), at::kFloat) << "the shard rests in its own dtype";
  EXPECT_EQ(model->w.grad().scalar_type(), at::kFloat) << "the optimizer sees float32";
  return model->w.grad();
}

TEST(MixedPrecision, TheReductionRunsInReduceDtypeAndTheForwardInParamDtype) {
  const int ranks = harness::max_world_size(4);
  ASSERT_TRUE(ranks == 2 || ranks == 4);
  const double mean = exact_mean(ranks);
  const at::Tensor exact = torch::full({4 / ranks}, mean);
  harness::run_ranks(ranks, [&](int rank) {
    at::ScalarType compute = at::kFloat;
    // float32 throughout: the exact mean.
    EXPECT_TRUE(torch::equal(dot_gradient(rank, {}, &compute), exact));
    EXPECT_EQ(compute, at::kFloat);
    // Reduced in bfloat16 (reduce_dtype follows param_dtype): the partial
    // sums round, whatever their order, off the exact mean by at most one
    // bfloat16 step at 1 (1/128); the forward saw bfloat16 parameters.
    at::Tensor rounded = dot_gradient(rank, {at::kBFloat16, std::nullopt, std::nullopt}, &compute);
    EXPECT_EQ(compute, at::kBFloat16);
    EXPECT_NE(rounded[0].item<double>(), mean);
    EXPECT_LE(std::abs(rounded[0].item<double>() - mean), 1 / 128.0);
    // bfloat16 forward, float32 reduction: exact again.
    EXPECT_TRUE(torch::equal(
        dot_gradient(rank, {at::kBFloat16, at::kFloat, std::nullopt}, &compute), exact));
    EXPECT_EQ(compute, at::kBFloat16);
  });
}

// Floating-point inputs are cast, others left alone; an input that
// bfloat16 rounds (1 + 2^-10 to 1) shows the cast in w's gradient too.
TEST(MixedPrecision, FloatingInputsTakeParamDtype) {
  harness::run_ranks(2, [](int) {
    auto model = std::make_shared<DtypeRecordingDot>();
    engine::model::FSDPOptions options;
    options.mixed_precision.param_dtype = at::kBFloat16;
    options.mixed_precision.reduce_dtype = at::kFloat;
    MMFullyShardedDataParallel fsdp(model, options);
    const TensorDict data = {{"x", torch::full({4}, 1 + std::ldexp(1.0, -10))},
                             {"labels", torch::arange(3)}};
    fsdp.forward(data, ForwardMode::kLoss).at("loss").backward();
    EXPECT_EQ(model->input_dtypes.at("x"), at::kBFloat16);
    EXPECT_EQ(model->input_dtypes.at("labels"), at::kLong);
    EXPECT_TRUE(torch::equal(model->w.grad(), torch::ones({2})));
  });
}

TEST(MixedPrecision, GatheredBytesAreInParamDtype) {
  harness::run_ranks(2, [](int rank) {
    auto model = std::make_shared<DtypeRecordingDot>();
    engine::model::FSDPOptions options;
    options.mixed_precision.param_dtype = at::kBFloat16;
    MMFullyShardedDataParallel fsdp(model, options);
    fsdp.forward({{"x", dot_input(rank)}}, ForwardMode::kLoss).at("loss").backward();
    EXPECT_EQ(fsdp.memory().gathered_peak, 4 * 2);       // four bfloat16 elements
    EXPECT_EQ(fsdp.memory().sharded_parameters, 2 * 4);  // two float32 elements
    EXPECT_EQ(fsdp.full_parameters().at("w").scalar_type(), at::kFloat);
  });
}

class Normed : public engine::model::BaseModel {
 public:
  Normed() {
    norm = register_module("norm", engine::model::BatchNorm(engine::model::BatchNormOptions(3)));
  }
  TensorDict forward(const TensorDict& data, ForwardMode) override {
    return {{"loss", norm(data.at("x")).pow(2).sum()}};
  }
  engine::model::BatchNorm norm{nullptr};
};

// Buffers live in buffer_dtype once wrapped, and the running statistics
// update there, with or without synchronisation; a checkpoint gets them in
// their own dtype.
TEST(MixedPrecision, BuffersRestInBufferDtypeAndCheckpointInTheirOwn) {
  for (bool sync : {false, true}) {
    harness::run_ranks(2, [sync](int rank) {
      auto model = std::make_shared<Normed>();
      if (sync) engine::model::convert_sync_batchnorm(*model);
      engine::model::FSDPOptions options;
      options.mixed_precision.buffer_dtype = at::kBFloat16;
      MMFullyShardedDataParallel fsdp(model, options);
      EXPECT_EQ(model->norm->running_mean.scalar_type(), at::kBFloat16);
      EXPECT_EQ(model->norm->num_batches_tracked.scalar_type(), at::kLong);
      const at::Tensor x = torch::arange(12, at::kFloat).view({4, 3}) * (rank + 1);
      fsdp.forward({{"x", x}}, ForwardMode::kLoss).at("loss").backward();
      const at::Tensor mean = model->norm->running_mean;
      EXPECT_EQ(mean.scalar_type(), at::kBFloat16);
      EXPECT_GT(mean.abs().sum().item<double>(), 0) << "the statistics were updated";
      const at::Tensor saved = fsdp.buffer_state("norm.running_mean", mean);
      EXPECT_EQ(saved.scalar_type(), at::kFloat);
      EXPECT_TRUE(torch::equal(saved, mean.to(at::kFloat)));
      EXPECT_EQ(fsdp.buffer_state("norm.num_batches_tracked", model->norm->num_batches_tracked)
                    .scalar_type(),
                at::kLong);
    });
  }
}

// Two linear layers side by side and a loss linear in their outputs, so
// that every gradient is a sum of products of small integers divided by the
// (power of two) batch: exact in bfloat16 whatever the order of the sums,
// at every step, and independent of the rounded forward values. Those are
// checked through each rank's loss, against the same computation in one
// process on that rank's batch.
class Linear2 : public engine::model::BaseModel {
 public:
  Linear2() {
    first = register_module("first", torch::nn::Linear(4, 2));
    second = register_module("second", torch::nn::Linear(4, 2));
  }
  TensorDict forward(const TensorDict& data, ForwardMode) override {
    const at::Tensor& x = data.at("x");
    const at::Tensor a = engine::model::call_unit(*first, [&] { return first(x); });
    const at::Tensor b = engine::model::call_unit(*second, [&] { return second(x); });
    return {{"loss", loss_of(torch::cat({a, b}, 1), data.at("t"))}};
  }
  static at::Tensor loss_of(const at::Tensor& out, const at::Tensor& t) {
    return (out * t).sum() / out.size(0);
  }
  torch::nn::Linear first{nullptr}, second{nullptr};
};

struct Bf16Case {
  std::string strategy;
  int world_size = 1;
  int64_t batch = 1;
  bool by_layer = false;
  int steps = 1;
  uint64_t seed = 0;
};

void showValue(const Bf16Case& c, std::ostream& os) {
  os << "strategy=" << c.strategy << " world_size=" << c.world_size << " batch=" << c.batch
     << " by_layer=" << c.by_layer << " steps=" << c.steps << " seed=" << c.seed;
}

// Rank `rank`'s batch at `step`: x in [-3, 3], t in [-2, 2], integers.
TensorDict integer_batch(const Bf16Case& c, int step, int rank) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(c.seed * 100 + step * 10 + rank);
  return {{"x", at::randint(-3, 4, {c.batch, 4}, generator, at::kFloat)},
          {"t", at::randint(-2, 3, {c.batch, 4}, generator, at::kFloat)}};
}

// Weights and biases in eighths.
std::shared_ptr<Linear2> eighths_model() {
  auto model = std::make_shared<Linear2>();
  torch::NoGradGuard no_grad;
  for (auto& param : model->parameters()) {
    param.copy_(torch::arange(param.numel(), at::kFloat).view(param.sizes()).remainder(9) / 8 -
                0.5);
  }
  return model;
}

// The parameters (by name) and then each step's loss of every rank.
using Bf16Run = std::vector<at::Tensor>;

Bf16Run serial_bf16(const Bf16Case& c) {
  auto model = eighths_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.125));
  // The differentiable casts give float32 gradients of a bfloat16 forward.
  auto bf16_forward = [&](const TensorDict& batch) {
    const at::Tensor x = batch.at("x").to(at::kBFloat16);
    auto linear = [&](torch::nn::Linear& layer) {
      return torch::nn::functional::linear(x, layer->weight.to(at::kBFloat16),
                                           layer->bias.to(at::kBFloat16));
    };
    return Linear2::loss_of(torch::cat({linear(model->first), linear(model->second)}, 1),
                            batch.at("t").to(at::kBFloat16));
  };
  std::vector<double> losses;
  for (int step = 0; step < c.steps; ++step) {
    std::vector<at::Tensor> xs, ts;
    for (int r = 0; r < c.world_size; ++r) {
      const auto batch = integer_batch(c, step, r);
      torch::NoGradGuard no_grad;
      losses.push_back(bf16_forward(batch).item<double>());
      xs.push_back(batch.at("x"));
      ts.push_back(batch.at("t"));
    }
    sgd.zero_grad();
    bf16_forward({{"x", torch::cat(xs)}, {"t", torch::cat(ts)}}).backward();
    sgd.step();
  }
  std::map<std::string, at::Tensor> by_name;  // in full_parameters()' order
  for (const auto& item : model->named_parameters()) by_name[item.key()] = item.value().detach();
  Bf16Run run;
  for (const auto& [name, value] : by_name) run.push_back(value);
  run.push_back(torch::tensor(losses, at::kDouble));
  return run;
}

Bf16Run fsdp_bf16(const Bf16Case& c, int rank) {
  engine::model::FSDPOptions options;
  options.sharding_strategy = engine::model::parse_sharding_strategy(c.strategy);
  if (c.strategy == "HYBRID_SHARD") options.hybrid_shard_size = std::max(1, c.world_size / 2);
  if (c.by_layer) options.auto_wrap_policy.module_types = {"Linear"};
  options.mixed_precision.param_dtype = at::kBFloat16;
  auto fsdp = std::make_shared<MMFullyShardedDataParallel>(eighths_model(), options);
  engine::optim::OptimWrapper optim(
      std::make_shared<torch::optim::SGD>(fsdp->parameters(), torch::optim::SGDOptions(0.125)));
  at::Tensor losses = torch::zeros({c.steps * c.world_size}, at::kDouble);
  for (int step = 0; step < c.steps; ++step) {
    const auto batch = fsdp->preprocess(integer_batch(c, step, rank), true);
    const at::Tensor loss = fsdp->forward(batch, ForwardMode::kLoss).at("loss");
    losses[step * c.world_size + rank] = loss.item<double>();
    optim.update_params(loss);
  }
  engine::dist::all_reduce(losses, "sum");  // each entry has one rank's loss, the others 0
  Bf16Run run;
  for (const auto& [name, value] : fsdp->full_parameters()) run.push_back(value);
  run.push_back(losses);
  return run;
}

// Drawn whole, so that a counterexample prints through showValue.
rc::Gen<Bf16Case> bf16_case() {
  return rc::gen::exec([] {
    Bf16Case c;
    c.strategy =
        *rc::gen::element<std::string>("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD");
    c.world_size = *rc::gen::element(1, 2, 4);
    c.batch = *rc::gen::element<int64_t>(1, 2, 4);
    c.by_layer = *rc::gen::arbitrary<bool>();
    c.steps = *rc::gen::inRange(1, 4);
    c.seed = *rc::gen::arbitrary<uint32_t>();
    return c;
  });
}

HARNESS_PROP(MixedPrecision, Bfloat16TrainingEqualsOneProcessInBfloat16BitForBit, ()) {
  const Bf16Case c = *bf16_case();
  RC_PRE(c.world_size <= harness::max_world_size(4));
  RC_TAG(c.strategy);
  const Bf16Run expected = serial_bf16(c);
  const auto per_rank = harness::collect_ranks<Bf16Run>(
      c.world_size, [&](int rank) { return fsdp_bf16(c, rank); }, harness::test_options(c.seed));
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (size_t i = 0; i < expected.size(); ++i) {
      const bool losses = i + 1 == expected.size();
      RC_ASSERT(per_rank[r][i].scalar_type() == (losses ? at::kDouble : at::kFloat));
      if (!torch::equal(per_rank[r][i], expected[i])) {
        RC_FAIL("rank " + std::to_string(r) +
                (losses ? " losses" : " parameter " + std::to_string(i)) +
                " differ from the serial run's by " +
                std::to_string((per_rank[r][i] - expected[i]).abs().max().item<double>()));
      }
    }
  }
}

}  // namespace
