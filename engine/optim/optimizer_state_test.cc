#include "engine/optim/optimizer_state.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/dist/pickle.h"

namespace engine::optim {
namespace {

using MakeOptimizer =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

std::vector<at::Tensor> make_params() {
  return {at::arange(6, at::kDouble).reshape({3, 2}).requires_grad_(),
          at::ones({4}, at::kDouble).requires_grad_(),
          at::zeros({2}, at::kDouble).requires_grad_()};  // never gets a gradient
}

// Steps with gradients that depend on `step` only, leaving the last
// parameter without one.
void train(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params, int from,
           int to) {
  for (int step = from; step < to; ++step) {
    for (size_t i = 0; i + 1 < params.size(); ++i) {
      params[i].mutable_grad() = at::full_like(params[i], 0.25 * (step + 1) + i);
    }
    optimizer.step();
  }
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const auto& param : params) out.push_back(param.detach().clone().requires_grad_());
  return out;
}

void expect_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "parameter " << i;
}

OptimizerState as_it_is(const OptimizerState& state) { return state; }

// Training three steps straight equals training one, carrying the state over
// (through `carry`) to a new optimizer, and training two more.
void expect_state_carries_training(
    const MakeOptimizer& make,
    const std::function<OptimizerState(const OptimizerState&)>& carry = as_it_is) {
  auto straight_params = make_params();
  auto straight = make(straight_params);
  train(*straight, straight_params, 0, 3);

  auto first_params = make_params();
  auto first = make(first_params);
  train(*first, first_params, 0, 1);
  const OptimizerState state = optimizer_state(*first);
  ASSERT_EQ(state.params.size(), 3u);
  EXPECT_FALSE(state.params[0].empty());
  EXPECT_TRUE(state.params[2].empty());  // no gradient, no state
  auto second_params = copies(first_params);
  auto second = make(second_params);
  load_optimizer_state(*second, carry(state));
  train(*second, second_params, 1, 3);
  expect_equal(straight_params, second_params);
}

std::unique_ptr<torch::optim::Optimizer> make_sgd(std::vector<at::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
}

std::unique_ptr<torch::optim::Optimizer> make_adam(std::vector<at::Tensor> params) {
  return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(0.1));
}

TEST(OptimizerStateTest, SgdMomentumCarriesOverToANewOptimizer) {
  expect_state_carries_training(make_sgd);
}

TEST(OptimizerStateTest, AdamMomentsAndStepCarryOverToANewOptimizer) {
  expect_state_carries_training(make_adam);
}

// Equal names in the same order, and equal values: tensors of the same
// dtype, shape and bits; anything else pickled alike.
void expect_same_values(const ValueDict& a, const ValueDict& b, const std::string& where) {
  ASSERT_EQ(a.size(), b.size()) << where;
  auto x = a.begin();
  for (auto y = b.begin(); y != b.end(); ++x, ++y) {
    const std::string name = where + " " + x->key().toStringRef();
    ASSERT_EQ(x->key().toStringRef(), y->key().toStringRef()) << where;
    ASSERT_EQ(x->value().isTensor(), y->value().isTensor()) << name;
    if (x->value().isTensor()) {
      const at::Tensor& u = x->value().toTensor();
      const at::Tensor& v = y->value().toTensor();
      EXPECT_EQ(u.scalar_type(), v.scalar_type()) << name;
      EXPECT_TRUE(u.sizes() == v.sizes() && at::equal(u, v)) << name;
    } else {
      EXPECT_TRUE(at::equal(dist::pickle(x->value()), dist::pickle(y->value()))) << name;
    }
  }
}

// The states of LibTorch's optimizers, read directly, are what their own
// archive gives back, and are copies: training on leaves them as taken.
TEST(OptimizerStateTest, DirectReadsEqualTheArchivesForEveryLibTorchOptimizer) {
  namespace o = torch::optim;
  const std::vector<std::pair<std::string, MakeOptimizer>> optimizers = {
      {"SGD", [](auto p) { return std::make_unique<o::SGD>(p, o::SGDOptions(0.1)); }},
      {"SGD nesterov",
       [](auto p) {
         return std::make_unique<o::SGD>(p, o::SGDOptions(0.1).momentum(0.9).nesterov(true));
       }},
      {"Adam", [](auto p) { return std::make_unique<o::Adam>(p, o::AdamOptions(0.1)); }},
      {"Adam amsgrad",
       [](auto p) { return std::make_unique<o::Adam>(p, o::AdamOptions(0.1).amsgrad(true)); }},
      {"AdamW", [](auto p) { return std::make_unique<o::AdamW>(p, o::AdamWOptions(0.1)); }},
      {"AdamW amsgrad",
       [](auto p) { return std::make_unique<o::AdamW>(p, o::AdamWOptions(0.1).amsgrad(true)); }},
      {"Adagrad", [](auto p) { return std::make_unique<o::Adagrad>(p, o::AdagradOptions(0.1)); }},
      {"RMSprop", [](auto p) { return std::make_unique<o::RMSprop>(p, o::RMSpropOptions(0.1)); }},
      {"RMSprop centered", [](auto p) {
         return std::make_unique<o::RMSprop>(p,
                                             o::RMSpropOptions(0.1).centered(true).momentum(0.5));
       }}};
  for (const auto& [name, make] : optimizers) {
    auto params = make_params();
    auto optimizer = make(params);
    for (int steps : {0, 2}) {
      train(*optimizer, params, 0, steps);
      const OptimizerState direct = optimizer_state(*optimizer);
      const OptimizerState archived = optimizer_state_through_archive(*optimizer);
      train(*optimizer, params, steps, steps + 1);
      const std::string where = name + " after " + std::to_string(steps) + " steps:";
      ASSERT_EQ(direct.params.size(), archived.params.size()) << where;
      for (size_t i = 0; i < direct.params.size(); ++i) {
        expect_same_values(direct.params[i], archived.params[i],
                           where + " parameter " + std::to_string(i));
      }
      ASSERT_EQ(direct.group_options.size(), 1u) << where;
      expect_same_values(direct.group_options[0], archived.group_options[0], where + " options");
      EXPECT_EQ(direct.group_sizes, archived.group_sizes) << where;
    }
    // Plain SGD keeps no state; every other one was compared with values.
    EXPECT_EQ(optimizer_state(*optimizer).params[0].empty(), name == "SGD") << name;
  }
}

TEST(OptimizerStateTest, StateValuesAndGroupOptionsAreNamedAndLoadedAsGiven) {
  auto params = make_params();
  auto adam = make_adam(params);
  train(*adam, params, 0, 2);
  OptimizerState state = optimizer_state(*adam);
  EXPECT_EQ(state.params[0].at("step").toInt(), 2);
  EXPECT_EQ(state.params[0].at("exp_avg").toTensor().sizes(), params[0].sizes());
  EXPECT_DOUBLE_EQ(state.group_options[0].at("lr").toDouble(), 0.1);
  state.params[1].insert_or_assign("exp_avg", at::full({4}, 7.0, at::kDouble));
  state.group_options[0].insert_or_assign("lr", 0.5);
  load_optimizer_state(*adam, state);
  const OptimizerState loaded = optimizer_state(*adam);
  EXPECT_TRUE(
      at::equal(loaded.params[1].at("exp_avg").toTensor(), at::full({4}, 7.0, at::kDouble)));
  EXPECT_DOUBLE_EQ(adam->param_groups()[0].options().get_lr(), 0.5);
}

TEST(OptimizerStateTest, StateForOtherGroupsIsRefusedWithTheSizes) {
  auto params = make_params();
  auto sgd = make_sgd(params);
  OptimizerState state = optimizer_state(*sgd);
  state.group_sizes = {2};
  state.params.pop_back();
  try {
    load_optimizer_state(*sgd, state);
    FAIL() << "loaded state for two parameters into an optimizer of three";
  } catch (const dist::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what())
                  .find("sizes [ 2 ] does not fit an optimizer whose groups "
                        "have [ 3 ] parameters"),
              std::string::npos)
        << error.what();
  }
}

// An SGD optimizer over two param groups: the first two parameters, then
// the third.
std::unique_ptr<torch::optim::Optimizer> make_grouped_sgd(std::vector<at::Tensor> params) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{params[0], params[1]});
  groups.emplace_back(std::vector<at::Tensor>{params[2]},
                      std::make_unique<torch::optim::SGDOptions>(0.2));
  return std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.1).momentum(0.9));
}

TEST(OptimizerStateTest, TheStateDictHasPyTorchsLayout) {
  auto params = make_params();
  auto sgd = make_grouped_sgd(params);
  train(*sgd, params, 0, 1);
  const c10::IValue dict = to_state_dict(optimizer_state(*sgd));
  const auto top = dict.toGenericDict();
  const auto states = top.at("state").toGenericDict();
  ASSERT_EQ(states.size(), 2u);  // the third parameter never had a gradient
  EXPECT_TRUE(at::equal(states.at(1).toGenericDict().at("momentum_buffer").toTensor(),
                        at::full({4}, 1.25, at::kDouble)));
  const auto groups = top.at("param_groups").toListRef();
  ASSERT_EQ(groups.size(), 2u);
  const auto indices = [&](size_t g) {
    std::vector<int64_t> out;
    for (const auto& index : groups[g].toGenericDict().at("params").toListRef()) {
      out.push_back(index.toInt());
    }
    return out;
  };
  EXPECT_EQ(indices(0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(indices(1), (std::vector<int64_t>{2}));
  EXPECT_DOUBLE_EQ(groups[1].toGenericDict().at("lr").toDouble(), 0.2);
  EXPECT_DOUBLE_EQ(groups[0].toGenericDict().at("momentum").toDouble(), 0.9);
}

TEST(OptimizerStateTest, StateCarriesOverThroughTheStateDictAsCheckpointsKeepIt) {
  for (const MakeOptimizer& make : {MakeOptimizer(make_grouped_sgd), MakeOptimizer(make_adam)}) {
    expect_state_carries_training(make, [](const OptimizerState& state) {
      const at::Tensor bytes = dist::pickle_untagged(to_state_dict(state));
      return from_state_dict(dist::unpickle(bytes, "the saved state"), "the saved state");
    });
  }
}

// `state_dict` with one change, and the words its error must hold.
struct Malformed {
  std::function<void(c10::impl::GenericDict&)> change;
  std::string words;
};

TEST(OptimizerStateTest, StateDictsOfAnotherLayoutAreInvalidArgumentSayingWhat) {
  auto params = make_params();
  auto sgd = make_grouped_sgd(params);
  train(*sgd, params, 0, 1);
  const auto group = [](c10::impl::GenericDict& dict, size_t g) {
    return dict.at("param_groups").toListRef()[g].toGenericDict();
  };
  const std::vector<Malformed> cases = {
      {[](auto& d) { static_cast<void>(d.erase("param_groups")); }, "it has no \"param_groups\""},
      {[](auto& d) { d.insert_or_assign("param_groups", 3); }, "param_groups must be a list"},
      {[&](auto& d) { group(d, 1).insert_or_assign("params", c10::List<int64_t>({5})); },
       "param group indices must count 0, 1, 2, ... across the groups in order"},
      {[&](auto& d) { static_cast<void>(group(d, 0).erase("params")); }, "it has no \"params\""},
      {[](auto& d) { d.insert_or_assign("state", c10::List<int64_t>({1})); },
       "state must be a dict"},
      {[](auto& d) { d.at("state").toGenericDict().insert(3, empty_value_dict()); },
       "\"state\" is keyed by parameter indices of the param groups"},
      {[](auto& d) { d.at("state").toGenericDict().insert_or_assign(0, 1.5); },
       "a parameter's state must be a dict"},
  };
  for (const Malformed& malformed : cases) {
    c10::IValue dict = to_state_dict(optimizer_state(*sgd));
    auto top = dict.toGenericDict();
    malformed.change(top);
    try {
      from_state_dict(dict, "file f");
      ADD_FAILURE() << "no error for " << malformed.words;
    } catch (const dist::InvalidArgument& error) {
      EXPECT_EQ(std::string(error.what()),
                "file f is not an optimizer state_dict: " + malformed.words);
    }
  }
  EXPECT_THROW(from_state_dict(c10::IValue(at::ones({3})), "file f"), dist::InvalidArgument);
}

TEST(OptimizerStateTest, StateOfTheWrongTypeIsInvalidArgument) {
  auto params = make_params();
  auto sgd = make_sgd(params);
  train(*sgd, params, 0, 1);
  OptimizerState state = optimizer_state(*sgd);
  state.params[0].insert_or_assign("momentum_buffer", std::string("not a tensor"));
  try {
    load_optimizer_state(*sgd, state);
    FAIL() << "no error";
  } catch (const dist::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("optimizer state that this optimizer cannot take"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace engine::optim
