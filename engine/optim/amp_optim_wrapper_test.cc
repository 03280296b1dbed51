// AmpOptimWrapper on one process: how the scale moves, where autocast is on,
// what a step with an overflow does, its saved state, and its config.
#include "engine/optim/amp_optim_wrapper.h"

#include <ATen/ops/full.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <limits>
#include <string>

#include "engine/dist/errors.h"
#include "engine/optim/builders.h"

namespace engine::optim {
namespace {

TEST(LossScaler, BacksOffAtAnOverflowAndGrowsAfterTheIntervalAsGradScaler) {
  LossScaler scaler({/*init_scale=*/1024, /*growth_factor=*/2, /*backoff_factor=*/0.5,
                     /*growth_interval=*/3});
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  scaler.update(true);  // an overflow resets the count
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  for (int i = 0; i < 3; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(LossScaler, AStaticScaleNeverMoves) {
  LossScalerOptions options;
  options.init_scale = 128;
  options.dynamic = false;
  LossScaler scaler(options);
  scaler.update(true);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 128);
}

TEST(LossScaler, AGrowthPastFloat32IsNotTaken) {
  LossScaler scaler({std::ldexp(1.0, 127), 2, 0.5, 1});
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0f, 127));
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(LossScaler, OptionsAndRestoredStateOutOfRangeAreRefused) {
  for (LossScalerOptions bad : {LossScalerOptions{0, 2, 0.5, 1}, LossScalerOptions{1e39, 2, 0.5, 1},
                                LossScalerOptions{1, 1, 0.5, 1}, LossScalerOptions{1, 2, 1, 1},
                                LossScalerOptions{1, 2, 0.5, 0}}) {
    EXPECT_THROW(LossScaler{bad}, dist::InvalidArgument);
  }
  LossScaler scaler;
  EXPECT_THROW(scaler.restore(-1, 0), dist::InvalidArgument);
  EXPECT_THROW(scaler.restore(std::numeric_limits<double>::infinity(), 0), dist::InvalidArgument);
  EXPECT_THROW(scaler.restore(2, -1), dist::InvalidArgument);
  scaler.restore(4, 5000);  // saved under a longer interval: grows at the next good step
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 8);
}

// loss = sum(matmul(x, w)): autocast computes the product in bfloat16.
struct Linear {
  at::Tensor w = at::ones({4, 2}).requires_grad_();
  at::ScalarType product_dtype = at::kFloat;
  at::Tensor loss(const at::Tensor& x) {
    at::Tensor product = at::matmul(x, w);
    product_dtype = product.scalar_type();
    return product.sum();
  }
};

std::shared_ptr<torch::optim::SGD> sgd(const at::Tensor& w, double lr = 0.5) {
  return std::make_shared<torch::optim::SGD>(std::vector<at::Tensor>{w},
                                             torch::optim::SGDOptions(lr));
}

AmpOptions bfloat16_scaled(double init_scale) {
  LossScalerOptions scaler;
  scaler.init_scale = init_scale;
  return {at::kBFloat16, scaler};
}

TEST(AmpOptimWrapper, TheForwardRunsUnderAutocastAndTheGradientsStayFloat32) {
  Linear net;
  AmpOptimWrapper wrapper(sgd(net.w), {}, bfloat16_scaled(1024));
  {
    auto scope = wrapper.optim_context(nullptr);
    const at::Tensor loss = net.loss(at::full({3, 4}, 0.5));
    EXPECT_EQ(net.product_dtype, at::kBFloat16);
    wrapper.update_params(loss);
  }
  EXPECT_EQ(net.w.grad().scalar_type(), at::kFloat);
  // d(loss)/dw = 3 * 0.5 in every element, scaled by 1024 and back: exact.
  EXPECT_FALSE(wrapper.last_step_skipped());
  EXPECT_TRUE(at::equal(net.w, at::full({4, 2}, 1 - 0.5 * 1.5)));
  net.loss(at::ones({3, 4}));
  EXPECT_EQ(net.product_dtype, at::kFloat) << "autocast ends with the scope";
}

TEST(AmpOptimWrapper, AnOverflowSkipsTheStepAndHalvesTheScale) {
  Linear net;
  AmpOptimWrapper wrapper(sgd(net.w), {}, bfloat16_scaled(65536));
  at::Tensor x = at::ones({1, 4});
  x[0][1] = 1e36;  // its gradient times the scale overflows float32
  wrapper.update_params(net.loss(x));
  EXPECT_TRUE(wrapper.last_step_skipped());
  EXPECT_EQ(wrapper.loss_scaler()->scale(), 32768);
  EXPECT_TRUE(at::equal(net.w, at::ones({4, 2})));
  EXPECT_FALSE(net.w.grad().defined() && net.w.grad().abs().sum().item<double>() != 0)
      << "the skipped step's gradients are zeroed all the same";
}

TEST(AmpOptimWrapper, BfloatWithoutAScalerStepsTheLossAsItIs) {
  Linear net;
  AmpOptimWrapper wrapper(sgd(net.w), {}, {at::kBFloat16, std::nullopt});
  EXPECT_EQ(wrapper.loss_scaler(), nullptr);
  EXPECT_TRUE(wrapper.state().empty());
  wrapper.update_params(net.loss(at::ones({1, 4})));
  EXPECT_TRUE(at::equal(net.w, at::full({4, 2}, 0.5)));
}

TEST(AmpOptimWrapper, ItsStateRoundTripsAndABadOneIsRefusedSayingWhat) {
  Linear net;
  AmpOptimWrapper saved(sgd(net.w), {}, bfloat16_scaled(1024));
  at::Tensor x = at::ones({1, 4});
  x[0][0] = 1e36;
  saved.update_params(net.loss(x));
  saved.update_params(net.loss(at::ones({1, 4})));
  AmpOptimWrapper resumed(sgd(net.w), {}, bfloat16_scaled(1024));
  resumed.load_state(saved.state());
  EXPECT_EQ(resumed.loss_scaler()->scale(), 512);
  EXPECT_EQ(resumed.loss_scaler()->growth_tracker(), 1);

  auto scaler_state = [](c10::IValue scale, c10::IValue tracker) {
    c10::impl::GenericDict scaler(c10::StringType::get(), c10::AnyType::get());
    scaler.insert("scale", scale);
    scaler.insert("_growth_tracker", tracker);
    c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
    out.insert("loss_scaler", scaler);
    return out;
  };
  auto error_of = [&](const c10::impl::GenericDict& state) -> std::string {
    try {
      resumed.load_state(state);
    } catch (const dist::InvalidArgument& error) {
      return error.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of(scaler_state(-2.0, 0)).find("finite and positive"), std::string::npos);
  EXPECT_NE(error_of(scaler_state(2.0, 1.5)).find("_growth_tracker is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of(scaler_state("big", 0)).find("no number \"scale\""), std::string::npos);
  c10::impl::GenericDict not_a_dict(c10::StringType::get(), c10::AnyType::get());
  not_a_dict.insert("loss_scaler", 3);
  EXPECT_NE(error_of(not_a_dict).find("not a dict"), std::string::npos);
  EXPECT_EQ(resumed.loss_scaler()->scale(), 512) << "a refused state leaves the scaler as it was";
}

TEST(AmpOptimWrapper, Float16OnTheCpuAndOtherDtypesAreRefused) {
  Linear net;
  EXPECT_THROW(AmpOptimWrapper(sgd(net.w), {}, {at::kHalf, LossScalerOptions{}}),
               dist::InvalidArgument);
  EXPECT_THROW(AmpOptimWrapper(sgd(net.w), {}, {at::kDouble, std::nullopt}), dist::InvalidArgument);
}

// CUDA parameters: float16 autocast, scaled by default, as mmengine's GPU
// path (skipped where no GPU is; ci/gpu.sh runs it on one).
TEST(AmpOptimWrapper, Float16OnCudaRunsTheProductInHalfAndSkipsAnOverflow) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  Linear net;
  net.w = at::ones({4, 2}, cuda).requires_grad_();
  auto built_here = build_optim_wrapper(
      registry::Json::parse(
          R"({"type": "AmpOptimWrapper", "optimizer": {"type": "SGD", "lr": 0.5}})"),
      {net.w});
  auto* wrapper = dynamic_cast<AmpOptimWrapper*>(built_here.get());
  ASSERT_NE(wrapper, nullptr);
  EXPECT_EQ(wrapper->amp_options().dtype, at::kHalf) << "CUDA parameters default to float16";
  ASSERT_NE(wrapper->loss_scaler(), nullptr) << "float16 is scaled by default";
  EXPECT_EQ(wrapper->loss_scaler()->scale(), 65536);
  const auto half_step = [&] {
    auto scope = wrapper->optim_context(nullptr);
    const at::Tensor loss = net.loss(at::full({3, 4}, 0.5, cuda));
    EXPECT_EQ(net.product_dtype, at::kHalf);
    EXPECT_EQ(loss.scalar_type(), at::kFloat) << "autocast sums in float32";
    wrapper->update_params(loss);
  };
  // The loss's gradient enters the half product as the scale itself, and
  // 2^16 is past float16's largest finite value (65504): GradScaler's first
  // step at its default scale is skipped the same way, and the scale halves.
  half_step();
  EXPECT_TRUE(wrapper->last_step_skipped());
  EXPECT_EQ(wrapper->loss_scaler()->scale(), 32768);
  EXPECT_TRUE(at::equal(net.w.cpu(), at::ones({4, 2})));
  half_step();
  EXPECT_EQ(net.w.grad().scalar_type(), at::kFloat);
  EXPECT_FALSE(wrapper->last_step_skipped());
  EXPECT_TRUE(at::equal(net.w.cpu(), at::full({4, 2}, 1 - 0.5 * 1.5)));

  at::Tensor x = at::ones({1, 4});
  x[0][1] = 1e36;  // its gradient times the scale overflows float32
  wrapper->update_params(net.loss(x.to(at::kCUDA)));
  EXPECT_TRUE(wrapper->last_step_skipped());
  EXPECT_EQ(wrapper->loss_scaler()->scale(), 16384);
  EXPECT_TRUE(at::equal(net.w.cpu(), at::full({4, 2}, 1 - 0.5 * 1.5)));
  net.loss(at::ones({3, 4}, cuda));
  EXPECT_EQ(net.product_dtype, at::kFloat) << "autocast ends with the scope";
}

std::shared_ptr<AmpOptimWrapper> built(const std::string& keys) {
  const auto config = registry::Json::parse(
      R"({"type": "AmpOptimWrapper", "optimizer": {"type": "SGD", "lr": 0.1})" + keys + "}");
  return std::dynamic_pointer_cast<AmpOptimWrapper>(
      build_optim_wrapper(config, {at::ones({2}).requires_grad_()}));
}

TEST(AmpOptimWrapper, ConfigsReadAsMmengineWritesThem) {
  auto cpu_default = built("");
  ASSERT_NE(cpu_default, nullptr);
  EXPECT_EQ(cpu_default->amp_options().dtype, at::kBFloat16);
  EXPECT_EQ(cpu_default->loss_scaler(), nullptr) << "bfloat16 is not scaled unless asked";
  auto dynamic = built(R"(, "dtype": "bfloat16", "loss_scale": "dynamic", "use_fsdp": true)");
  EXPECT_EQ(dynamic->loss_scaler()->scale(), 65536);
  EXPECT_TRUE(dynamic->loss_scaler()->options().dynamic);
  auto fixed = built(R"(, "loss_scale": 512)");
  EXPECT_EQ(fixed->loss_scaler()->scale(), 512);
  EXPECT_FALSE(fixed->loss_scaler()->options().dynamic);
  auto kwargs = built(R"(, "loss_scale": {"init_scale": 8, "growth_interval": 10})");
  EXPECT_EQ(kwargs->loss_scaler()->scale(), 8);
  EXPECT_EQ(kwargs->loss_scaler()->options().growth_interval, 10);
  EXPECT_EQ(built(R"(, "loss_scale": {"enabled": false})")->loss_scaler(), nullptr);

  auto error_of = [](const std::string& keys) -> std::string {
    try {
      built(keys);
    } catch (const registry::ConfigError& error) {
      return error.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of(R"(, "dtype": "float8")").find("\"dtype\" must be"), std::string::npos);
  EXPECT_NE(error_of(R"(, "dtype": "float16")").find("float16 autocast needs CUDA"),
            std::string::npos);
  EXPECT_NE(error_of(R"(, "loss_scale": "static")").find("\"loss_scale\" must be"),
            std::string::npos);
  EXPECT_NE(error_of(R"(, "loss_scale": [1])").find("not array"), std::string::npos);
  EXPECT_NE(error_of(R"(, "loss_scale": {"growth": 2})").find("unknown key(s) growth"),
            std::string::npos);
  EXPECT_NE(error_of(R"(, "loss_scale": -1)").find("init_scale must be finite and positive"),
            std::string::npos);
}

}  // namespace
}  // namespace engine::optim
