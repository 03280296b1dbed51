// DDP communication hooks: the default hooks against the reducer without
// one, the compression hooks against their precision, PowerSGD against
// plain averaging and its error feedback, registration and configs.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/types.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/model/comm_hooks/comm_hook_registry.h"
#include "engine/model/comm_hooks/powersgd.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/model/wrappers/separate_distributed_data_parallel.h"
#include "engine/model/wrappers/wrapper_registry.h"
#include "engine/registry/config.h"
#include "testing/harness.h"
#include "testing/model/nets.h"

namespace {

using engine::model::CommHook;
using engine::model::CommHookPtr;
using engine::model::DDPOptions;
using engine::model::ForwardMode;
using engine::model::GradBucket;
using engine::model::MMDistributedDataParallel;
using engine::model::PowerSGDOptions;
// Parameters after each step, every step's in the order of their names (a
// form that travels between processes: harness::collect_ranks).
using ParametersPerStep = std::vector<at::Tensor>;

nets::NetSpec two_headed_mlp() {
  nets::NetSpec spec;
  spec.trunk = {5, 3};
  spec.heads = 2;
  return spec;
}

// Three SGD steps (lr 0.1) of `world` ranks under DDP with `options` and the
// hook `make_hook` builds on each rank (null: none), from `initial`'s state;
// each rank's parameters after each step.
std::vector<ParametersPerStep> train(const nets::NetSpec& spec, nets::TestNet& initial, int world,
                                     DDPOptions options,
                                     const std::function<CommHookPtr()>& make_hook = nullptr) {
  return harness::collect_ranks<ParametersPerStep>(world, [&](int rank) {
    ParametersPerStep out;
    auto net = nets::make_net(spec);
    nets::copy_state(initial, *net);
    DDPOptions mine = options;
    if (make_hook) mine.comm_hook = make_hook();
    MMDistributedDataParallel ddp(net, mine);
    for (int step = 0; step < 3; ++step) {
      // Head 1 on even steps only: with find_unused_parameters its
      // gradients are sometimes missing.
      const std::vector<bool> heads{true, step % 2 == 0 || !options.find_unused_parameters};
      auto data = nets::make_batch(spec, 3, 100 * step + rank, heads);
      ddp.forward(data, ForwardMode::kLoss).at("loss").backward();
      torch::NoGradGuard no_grad;
      for (auto& param : net->parameters()) {
        if (param.grad().defined()) param.sub_(param.grad() * 0.1);
        param.mutable_grad() = at::Tensor();
      }
      for (const auto& [name, value] : nets::snapshot(*net)) out.push_back(value);
    }
    return out;
  });
}

void expect_bit_identical(const ParametersPerStep& expected, const ParametersPerStep& got,
                          const std::string& who) {
  ASSERT_EQ(expected.size(), got.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::equal(got[i], expected[i])) << who << ": value " << i << " of the steps";
  }
}

// The parameters after the last of three steps, by name.
std::map<std::string, at::Tensor> last_step(const ParametersPerStep& steps, nets::TestNet& net) {
  const auto names = nets::snapshot(net);
  std::map<std::string, at::Tensor> out;
  size_t i = steps.size() - names.size();
  for (const auto& [name, value] : names) out[name] = steps[i++];
  return out;
}

class AllreduceHook : public testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(AllreduceHook, IsBitForBitTheReducerWithoutAHook) {
  const auto spec = two_headed_mlp();
  const auto initial = nets::make_net(spec);
  DDPOptions options;
  options.gradient_as_bucket_view = std::get<0>(GetParam());
  options.find_unused_parameters = std::get<1>(GetParam());
  options.bucket_cap_mb = 100.0 / (1 << 20);  // several buckets
  const int world = harness::max_world_size(3);
  const auto plain = train(spec, *initial, world, options);
  const auto hooked = train(spec, *initial, world, options, engine::model::allreduce_hook);
  for (int rank = 0; rank < world; ++rank) {
    expect_bit_identical(plain[rank], hooked[rank], "rank " + std::to_string(rank));
  }
  // The run trained: the hook did not just leave the parameters alone.
  EXPECT_FALSE(torch::equal(last_step(plain[0], *initial).at("trunk0.weight"),
                            initial->named_parameters()["trunk0.weight"]));
}

INSTANTIATE_TEST_SUITE_P(BucketViewAndUnusedParameters, AllreduceHook,
                         testing::Combine(testing::Bool(), testing::Bool()));

// Each rank's bucket: `numel` values in [-1, 1) drawn from `seed`.
at::Tensor bucket_values(int64_t numel, uint64_t seed, at::ScalarType dtype) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::rand({numel}, generator, at::TensorOptions(dtype)).mul_(2).sub_(1);
}

// Runs `hook` over the last bucket of a backward holding a copy of `values`,
// its gradients views of the leading elements shaped as `shapes`; the
// hook's result.
at::Tensor run_hook(CommHook& hook, const at::Tensor& values,
                    const std::vector<std::vector<int64_t>>& shapes) {
  GradBucket bucket;
  bucket.is_last = true;
  bucket.buffer = values.clone();
  int64_t offset = 0;
  for (const auto& shape : shapes) {
    const int64_t numel = c10::multiply_integers(shape);
    bucket.gradients.push_back(bucket.buffer.narrow(0, offset, numel).view(shape));
    offset += numel;
  }
  auto work = hook.run(bucket, engine::dist::get_default_group());
  work.work->wait();
  return work.result.clone();
}

// Runs `hook` over a bucket holding `values[rank]` (viewed as `shapes`) on
// every rank; every rank's result.
std::vector<at::Tensor> reduce_with(const std::function<CommHookPtr()>& make_hook,
                                    const std::vector<at::Tensor>& values,
                                    const std::vector<std::vector<int64_t>>& shapes,
                                    int steps = 1) {
  return harness::collect_ranks<at::Tensor>(static_cast<int>(values.size()), [&](int rank) {
    CommHookPtr hook = make_hook();
    at::Tensor out;
    for (int step = 0; step < steps; ++step) out = run_hook(*hook, values[rank], shapes);
    return out;
  });
}

at::Tensor mean_of(const std::vector<at::Tensor>& values) {
  at::Tensor sum = at::zeros_like(values[0], at::kDouble);
  for (const auto& value : values) sum += value.to(at::kDouble);
  return sum / static_cast<double>(values.size());
}

void expect_same_on_every_rank(const std::vector<at::Tensor>& results) {
  for (size_t rank = 1; rank < results.size(); ++rank) {
    EXPECT_TRUE(torch::equal(results[rank], results[0]))
        << "rank " << rank << " differs from rank 0";
  }
}

struct Compression {
  std::string name;
  std::function<CommHookPtr()> make;
  double unit_roundoff;
};

class CompressionHook : public testing::TestWithParam<Compression> {};

// Each value is rounded once into the wire dtype, once by the division and
// once per addition of the sum (partial sums of means stay within the
// largest magnitude, 1): at most (world + 1) roundings of size 1.
TEST_P(CompressionHook, StaysWithinItsPrecisionAndIsTheSameOnEveryRank) {
  const int world = harness::max_world_size(3);
  std::vector<at::Tensor> values;
  for (int rank = 0; rank < world; ++rank)
    values.push_back(bucket_values(1000, 7 + rank, at::kFloat));
  const auto results = reduce_with(GetParam().make, values, {{1000}});
  expect_same_on_every_rank(results);
  const at::Tensor error = (results[0].to(at::kDouble) - mean_of(values)).abs();
  const double bound = (world + 1) * GetParam().unit_roundoff;
  EXPECT_LE(error.max().item<double>(), bound) << GetParam().name;
  EXPECT_GT(error.max().item<double>(), 1e-6) << GetParam().name << " did not compress";
  EXPECT_EQ(results[0].scalar_type(), at::kFloat) << "cast back to the bucket's dtype";
}

INSTANTIATE_TEST_SUITE_P(
    Fp16AndBf16, CompressionHook,
    testing::Values(Compression{"fp16", engine::model::fp16_compress_hook, std::ldexp(1.0, -11)},
                    Compression{"bf16", engine::model::bf16_compress_hook, std::ldexp(1.0, -8)}),
    [](const auto& info) { return info.param.name; });

TEST(CompressionHook, TrainsDdpToTheSameParametersOnEveryRank) {
  const auto spec = two_headed_mlp();
  const auto initial = nets::make_net(spec);
  DDPOptions options;
  options.bucket_cap_mb = 100.0 / (1 << 20);
  const int world = harness::max_world_size(3);
  const auto plain = train(spec, *initial, world, options);
  const auto compressed = train(spec, *initial, world, options, engine::model::bf16_compress_hook);
  for (int rank = 1; rank < world; ++rank)
    expect_bit_identical(compressed[0], compressed[rank], "rank " + std::to_string(rank));
  const auto compressed_last = last_step(compressed[0], *initial);
  for (const auto& [name, value] : last_step(plain[0], *initial)) {
    EXPECT_TRUE(torch::allclose(compressed_last.at(name), value, 0, 1e-2)) << name;
  }
}

// Shapes of every kind the hook meets: matrices both ways, a vector, a
// tensor of rank 3 (viewed as 2 x 6), a scalar and an empty one.
const std::vector<std::vector<int64_t>> kShapes{{4, 6}, {6, 4}, {5}, {2, 3, 2}, {}, {0, 3}};
constexpr int64_t kShapesNumel = 24 + 24 + 5 + 12 + 1 + 0;

TEST(PowerSgd, AtFullRankEqualsPlainAveraging) {
  const int world = harness::max_world_size(3);
  std::vector<at::Tensor> values;
  for (int rank = 0; rank < world; ++rank)
    values.push_back(bucket_values(kShapesNumel, 40 + rank, at::kDouble));
  PowerSGDOptions options;
  options.matrix_approximation_rank = 6;
  options.min_compression_rate = 0;  // compress even what would not pay
  options.start_powerSGD_iter = 0;
  options.use_error_feedback = false;
  options.warm_start = false;
  const auto results =
      reduce_with([&] { return engine::model::powersgd_hook(options); }, values, kShapes);
  expect_same_on_every_rank(results);
  EXPECT_TRUE(torch::allclose(results[0], mean_of(values), 0, 1e-12));
  // At rank 1 the matrices are approximations, not the mean.
  options.matrix_approximation_rank = 1;
  const auto low =
      reduce_with([&] { return engine::model::powersgd_hook(options); }, values, kShapes);
  EXPECT_FALSE(torch::allclose(low[0], mean_of(values), 0, 1e-3));
}

// Steps of rank-1 PowerSGD from its first compressed step, each rank with
// gradients of its own per step: what each rank got, and its error after
// the last step.
struct Compressed {
  std::vector<std::vector<at::Tensor>> results;  // [rank][step]
  std::vector<at::Tensor> errors;                // [rank]
};

Compressed compress_steps(const std::vector<std::vector<at::Tensor>>& gradients, bool feedback) {
  const int world = static_cast<int>(gradients.size());
  const size_t steps = gradients[0].size();
  // Per rank: its result at each step, then its error (empty without).
  const auto seen = harness::collect_ranks<std::vector<at::Tensor>>(world, [&](int rank) {
    std::vector<at::Tensor> out;
    PowerSGDOptions options;
    options.start_powerSGD_iter = 2;
    options.min_compression_rate = 1;
    options.use_error_feedback = feedback;
    CommHookPtr hook = engine::model::powersgd_hook(options);
    for (size_t step = 0; step < steps + 2; ++step) {
      at::Tensor result = run_hook(*hook, gradients[rank][step < 2 ? 0 : step - 2], kShapes);
      if (step >= 2) out.push_back(result);
    }
    out.push_back(feedback ? hook->state().at("error/0") : at::zeros({0}, at::kDouble));
    return out;
  });
  Compressed out;
  for (const auto& rank : seen) {
    out.results.emplace_back(rank.begin(), rank.end() - 1);
    out.errors.push_back(rank.back());
  }
  return out;
}

TEST(PowerSgd, ErrorFeedbackCarriesWhatCompressionLeftOutIntoTheNextSteps) {
  const int world = 2;
  const int steps = 4;
  std::vector<std::vector<at::Tensor>> gradients(world);
  for (int rank = 0; rank < world; ++rank) {
    for (int step = 0; step < steps; ++step) {
      gradients[rank].push_back(bucket_values(kShapesNumel, 100 * rank + step, at::kDouble));
    }
  }
  const Compressed with = compress_steps(gradients, true);
  for (int rank = 0; rank < world; ++rank) {
    at::Tensor sent = at::zeros({kShapesNumel}, at::kDouble), own = sent.clone();
    for (int step = 0; step < steps; ++step) {
      EXPECT_TRUE(torch::equal(with.results[rank][step], with.results[0][step])) << "rank " << rank;
      sent += with.results[rank][step];
      own += gradients[rank][step];
    }
    // Each step's result is the rank's input less its new error, so over
    // the steps nothing of the rank's gradients is lost.
    EXPECT_TRUE(torch::allclose(sent + with.errors[rank], own, 0, 1e-12)) << "rank " << rank;
    EXPECT_GT(with.errors[rank].abs().max().item<double>(), 1e-3) << "compression left nothing out";
  }
  const Compressed without = compress_steps(gradients, false);
  EXPECT_TRUE(torch::equal(without.results[0][0], with.results[0][0]))
      << "no error yet at the first step";
  EXPECT_FALSE(torch::allclose(without.results[0][1], with.results[0][1], 0, 1e-6))
      << "the second step ignored the first step's error";
}

TEST(PowerSgd, OptionsOutOfRangeAreRefusedNamingTheKey) {
  PowerSGDOptions options;
  options.start_powerSGD_iter = 1;
  try {
    engine::model::powersgd_hook(options);
    FAIL() << "start_powerSGD_iter 1 with error feedback was accepted";
  } catch (const engine::dist::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("start_powerSGD_iter must be at least 2"),
              std::string::npos);
  }
  options.start_powerSGD_iter = 1000;
  options.matrix_approximation_rank = 0;
  EXPECT_THROW(engine::model::powersgd_hook(options), engine::dist::InvalidArgument);
}

TEST(PowerSgd, StateRoundTripsAndRefusesForeignEntries) {
  std::vector<at::Tensor> values{bucket_values(kShapesNumel, 1, at::kDouble)};
  harness::run_ranks(1, [&](int) {
    PowerSGDOptions options;
    options.start_powerSGD_iter = 2;
    CommHookPtr hook = engine::model::powersgd_hook(options);
    CommHookPtr copy = engine::model::powersgd_hook(options);
    auto run_once = [&](CommHookPtr& current) { return run_hook(*current, values[0], {{4, 6}}); };
    for (int step = 0; step < 3; ++step) run_once(hook);
    copy->load_state(hook->state());
    std::vector<at::Tensor> next{run_once(hook), run_once(copy)};
    EXPECT_TRUE(torch::equal(next[0], next[1])) << "a restored hook goes on as the original";
    auto foreign = hook->state();
    foreign.insert("momentum/0", at::zeros({1}));
    EXPECT_THROW(copy->load_state(foreign), engine::dist::InvalidArgument);
  });
}

TEST(CommHookRegistration, RanksThatRegisterDifferentHooksAllFailNamingBoth) {
  const auto spec = two_headed_mlp();
  const auto errors = harness::collect_ranks<std::string>(2, [&](int rank) {
    MMDistributedDataParallel ddp(nets::make_net(spec), {});
    try {
      ddp.register_comm_hook(rank == 0 ? engine::model::allreduce_hook()
                                       : engine::model::fp16_compress_hook());
    } catch (const engine::dist::InvalidArgument& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  });
  for (const auto& error : errors) {
    EXPECT_NE(error.find("allreduce on its first rank, fp16_compress on its rank 1"),
              std::string::npos)
        << error;
  }
}

TEST(CommHookRegistration, OnceAndBeforeTheFirstBackward) {
  const auto spec = two_headed_mlp();
  harness::run_ranks(2, [&](int rank) {
    auto net = nets::make_net(spec);
    MMDistributedDataParallel twice(net, {});
    twice.register_comm_hook(engine::model::allreduce_hook());
    EXPECT_THROW(twice.register_comm_hook(engine::model::allreduce_hook()),
                 engine::dist::InvalidArgument);
    auto other = nets::make_net(spec);
    MMDistributedDataParallel late(other, {});
    late.forward(nets::make_batch(spec, 2, rank, {true, true}), ForwardMode::kLoss)
        .at("loss")
        .backward();
    try {
      late.register_comm_hook(engine::model::allreduce_hook());
      ADD_FAILURE() << "a hook was registered after a backward";
    } catch (const engine::dist::InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("before the first synchronised backward"),
                std::string::npos);
    }
  });
}

engine::registry::Json ddp_with_hook(engine::registry::Json hook) {
  return {{"type", "MMDistributedDataParallel"}, {"comm_hook", std::move(hook)}};
}

TEST(CommHookConfig, BuildsEveryTypeAndNamesMistakes) {
  const auto spec = two_headed_mlp();
  harness::run_ranks(2, [&](int) {
    for (const std::string type : {"allreduce", "fp16_compress", "bf16_compress"}) {
      auto built = engine::model::model_wrappers().build(ddp_with_hook({{"type", type}}),
                                                         nets::make_net(spec));
      auto& ddp = dynamic_cast<MMDistributedDataParallel&>(*built);
      EXPECT_EQ(ddp.reducer().comm_hook()->describe(), type);
    }
    auto built = engine::model::model_wrappers().build(
        ddp_with_hook(
            {{"type", "PowerSGD"}, {"matrix_approximation_rank", 2}, {"start_powerSGD_iter", 10}}),
        nets::make_net(spec));
    const std::string described =
        dynamic_cast<MMDistributedDataParallel&>(*built).reducer().comm_hook()->describe();
    EXPECT_NE(described.find("matrix_approximation_rank=2, start_powerSGD_iter=10"),
              std::string::npos)
        << described;
  });
  // The bucket's bytes must fit int64_t.
  for (const double cap : {0.0, -1.0, 1e300}) {
    try {
      engine::model::model_wrappers().build(
          {{"type", "MMDistributedDataParallel"}, {"bucket_cap_mb", cap}}, nets::make_net(spec));
      ADD_FAILURE() << "bucket_cap_mb " << cap << " was accepted";
    } catch (const engine::registry::ConfigError& error) {
      EXPECT_NE(
          std::string(error.what()).find("key \"bucket_cap_mb\" must be positive and at most 2^30"),
          std::string::npos)
          << error.what();
    }
  }
  const std::vector<std::pair<engine::registry::Json, std::string>> mistakes{
      {{{"type", "PowerSGD"}, {"start_powerSGD_iter", 1}},
       "start_powerSGD_iter must be at least 2"},
      {{{"type", "PowerSGD"}, {"rank", 1}}, "unknown key(s) rank"},
      {{{"type", "gossip"}}, "known types: PowerSGD, allreduce, bf16_compress, fp16_compress"}};
  for (const auto& [hook, expected] : mistakes) {
    try {
      engine::model::comm_hooks().build(hook);
      ADD_FAILURE() << hook.dump() << " was accepted";
    } catch (const engine::registry::ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  }
}

TEST(CommHookConfig, TheSeparateWrapperRefusesAHook) {
  harness::run_ranks(1, [&](int) {
    DDPOptions options;
    options.comm_hook = engine::model::allreduce_hook();
    EXPECT_THROW(std::make_shared<engine::model::MMSeparateDistributedDataParallel>(
                     nets::make_net(two_headed_mlp()), options),
                 engine::dist::InvalidArgument);
  });
}

}  // namespace
