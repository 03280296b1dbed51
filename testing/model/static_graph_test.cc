// MMDistributedDataParallel's static_graph: reentrant backwards that reach a
// parameter several times average like any other gradient, in the first
// backward (reduced at its end) and in later ones (each parameter ready at
// its last arrival); a graph that changes is a typed error naming the
// parameter. (static_graph with no_sync and accumulation, unused parameters
// included, is a factor of the DDP equivalence grid: ddp_cases.)
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "testing/harness.h"
#include "testing/model/nets.h"

namespace {

using engine::model::DDPOptions;
using engine::model::ForwardMode;
using engine::model::MMDistributedDataParallel;
using engine::model::TensorDict;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// PyTorch's reentrant checkpoint: the forward keeps nothing; the backward
// runs the layer again and calls backward on it from inside the outer
// backward, so the layer's parameters receive their gradients (and fire
// their accumulators' hooks) once per application.
class ReentrantLayer : public torch::autograd::Function<ReentrantLayer> {
 public:
  static variable_list forward(AutogradContext* ctx, torch::nn::LinearImpl* layer,
                               const at::Tensor& input) {
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->save_for_backward({input});
    return {layer->forward(input)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* layer = reinterpret_cast<torch::nn::LinearImpl*>(ctx->saved_data["layer"].toInt());
    at::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_();
    at::Tensor output;
    {
      torch::AutoGradMode grad_mode(true);
      output = layer->forward(input);
    }
    torch::autograd::backward({output}, {grads[0]});
    return {at::Tensor(), input.grad()};
  }
};

// One Linear applied twice through ReentrantLayer: its weight and bias
// arrive twice in every backward.
class TwiceReentrant : public engine::model::BaseModel {
 public:
  TwiceReentrant() {
    layer_ = register_module("layer", torch::nn::Linear(4, 4));
    torch::NoGradGuard no_grad;
    layer_->weight.copy_(torch::linspace(-1, 1, 16).view({4, 4}));
    layer_->bias.copy_(torch::linspace(0.5, -0.5, 4));
  }
  TensorDict forward(const TensorDict& data, ForwardMode) override {
    at::Tensor h = ReentrantLayer::apply(layer_.get(), data.at("x"))[0];
    at::Tensor out = ReentrantLayer::apply(layer_.get(), torch::tanh(h))[0];
    return {{"loss", out.pow(2).sum()}};
  }

 private:
  torch::nn::Linear layer_{nullptr};
};

// Requires grad: a reentrant checkpoint's output is in the graph only
// through its inputs (PyTorch's warns when none requires grad).
TensorDict input_of(int rank, int step) {
  return {{"x", (torch::linspace(-1, 1, 12).view({3, 4}) * (1 + rank) + step).requires_grad_()}};
}

std::map<std::string, at::Tensor> gradients(torch::nn::Module& module) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : module.named_parameters()) out[item.key()] = item.value().grad().clone();
  return out;
}

TEST(StaticGraph, ReentrantBackwardsAverageInTheFirstBackwardAndAfter) {
  const int world = 3;
  constexpr int kSteps = 3;
  // [step][rank]: the gradient each rank computes alone, and under DDP.
  std::vector<std::vector<std::map<std::string, at::Tensor>>> local(
      kSteps, std::vector<std::map<std::string, at::Tensor>>(world));
  auto synced = local;
  harness::run_ranks(world, [&](int rank) {
    for (int step = 0; step < kSteps; ++step) {
      TwiceReentrant alone;
      alone.forward(input_of(rank, step), ForwardMode::kLoss).at("loss").backward();
      local[step][rank] = gradients(alone);
    }
    auto net = std::make_shared<TwiceReentrant>();
    DDPOptions options;
    options.static_graph = true;
    options.bucket_cap_mb = 40.0 / (1 << 20);  // weight and bias in buckets of their own
    MMDistributedDataParallel ddp(net, options);
    for (int step = 0; step < kSteps; ++step) {
      ddp.zero_grad();
      ddp.forward(input_of(rank, step), ForwardMode::kLoss).at("loss").backward();
      synced[step][rank] = gradients(*net);
    }
  });
  for (int step = 0; step < kSteps; ++step) {
    for (const auto& [name, grad] : synced[step][0]) {
      at::Tensor expected = at::zeros_like(grad);
      for (int r = 0; r < world; ++r) expected += local[step][r].at(name);
      expected /= world;
      EXPECT_TRUE(torch::allclose(grad, expected, 1e-5, 1e-6))
          << "step " << step << ", " << name << ": " << grad << "\nwanted " << expected;
      for (int r = 1; r < world; ++r) {
        EXPECT_TRUE(torch::equal(synced[step][r].at(name), grad)) << "rank " << r << ", " << name;
      }
    }
  }
}

TEST(StaticGraph, WithoutItAReentrantBackwardIsAnErrorThatPointsAtIt) {
  harness::run_ranks(2, [&](int rank) {
    auto net = std::make_shared<TwiceReentrant>();
    MMDistributedDataParallel ddp(net, DDPOptions{});
    try {
      ddp.forward(input_of(rank, 0), ForwardMode::kLoss).at("loss").backward();
      ADD_FAILURE() << "a gradient that arrived twice was accepted";
    } catch (const engine::dist::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("static_graph"), std::string::npos) << e.what();
    }
  });
}

TEST(StaticGraph, AGraphThatChangesIsAnErrorNamingTheParameter) {
  nets::NetSpec spec;
  spec.trunk = {4};
  spec.heads = 2;
  harness::run_ranks(2, [&](int rank) {
    auto net = nets::make_net(spec);
    DDPOptions options;
    options.static_graph = true;
    MMDistributedDataParallel ddp(net, options);
    ddp.forward(nets::make_batch(spec, 3, 100 + rank, {true, true}), ForwardMode::kLoss)
        .at("loss")
        .backward();
    try {
      ddp.forward(nets::make_batch(spec, 3, 200 + rank, {true, false}), ForwardMode::kLoss)
          .at("loss")
          .backward();
      ADD_FAILURE() << "a head the first backward used went unused without an error";
    } catch (const engine::dist::InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("\"head1."), std::string::npos) << what;
      EXPECT_NE(what.find("static_graph"), std::string::npos) << what;
    }
  });
}

}  // namespace
