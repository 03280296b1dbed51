#include "engine/optim/optim_wrapper_dict.h"

#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/dist/errors.h"

namespace engine::optim {
namespace {

std::shared_ptr<OptimWrapper> sgd_over(const at::Tensor& param, double lr) {
  return std::make_shared<OptimWrapper>(std::make_shared<torch::optim::SGD>(
      std::vector<at::Tensor>{param}, torch::optim::SGDOptions(lr)));
}

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const dist::InvalidArgument& error) {
    return error.what();
  }
  return "no error";
}

TEST(OptimWrapperDict, EachWrapperStepsItsOwnParametersByName) {
  at::Tensor g = at::ones({2}).requires_grad_();
  at::Tensor d = at::ones({2}).requires_grad_();
  OptimWrapperDict wrappers(
      {{"generator", sgd_over(g, 0.5)}, {"discriminator", sgd_over(d, 0.25)}});
  EXPECT_EQ(wrappers.size(), 2u);
  EXPECT_TRUE(wrappers.contains("generator"));
  EXPECT_FALSE(wrappers.contains("critic"));
  wrappers.at("generator").update_params((g * 2).sum());
  EXPECT_TRUE(at::equal(g, at::full({2}, 0.0))) << "1 - 0.5 * 2";
  EXPECT_TRUE(at::equal(d, at::ones({2}))) << "the discriminator's wrapper did not step";
  (d * 4).sum().backward();
  wrappers.zero_grad();
  EXPECT_FALSE(d.grad().defined() && d.grad().abs().sum().item<double>() != 0);
  const auto rates = wrappers.learning_rates();
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_EQ(rates[0], std::make_pair(std::string("generator.lr"), 0.5));
  EXPECT_EQ(rates[1], std::make_pair(std::string("discriminator.lr"), 0.25));
}

TEST(OptimWrapperDict, MistakesAreNamed) {
  at::Tensor p = at::ones({1}).requires_grad_();
  EXPECT_NE(error_of([] { OptimWrapperDict({}); }).find("needs at least one"), std::string::npos);
  EXPECT_NE(error_of([&] {
              OptimWrapperDict({{"a", sgd_over(p, 1)}, {"a", sgd_over(p, 1)}});
            }).find("the name \"a\" comes twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              OptimWrapperDict({{"", sgd_over(p, 1)}});
            }).find("needs a name"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              OptimWrapperDict({{"a", nullptr}});
            }).find("\"a\" is null"),
            std::string::npos);
  OptimWrapperDict wrappers({{"generator", sgd_over(p, 1)}, {"discriminator", sgd_over(p, 1)}});
  EXPECT_NE(error_of([&] {
              wrappers.at("critic");
            }).find("has no wrapper \"critic\"; it has generator, discriminator"),
            std::string::npos);
}

}  // namespace
}  // namespace engine::optim
