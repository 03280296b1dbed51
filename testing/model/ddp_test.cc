// MMDistributedDataParallel's behaviour beyond equivalence: averaging, bucket
// order and overlap, buffers, no_sync, unused parameters, errors, wrappers.
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <algorithm>
#include <set>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/model/comm_hooks/comm_hook.h"
#include "engine/model/wrappers/ddp_logging.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/model/wrappers/separate_distributed_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
#include "testing/harness.h"
#include "testing/model/nets.h"

namespace {

using engine::model::DDPOptions;
using engine::model::ForwardMode;
using engine::model::MMDistributedDataParallel;
using engine::model::TensorDict;

nets::NetSpec mlp(std::vector<int64_t> trunk, int64_t heads = 1) {
  nets::NetSpec spec;
  spec.trunk = std::move(trunk);
  spec.heads = heads;
  return spec;
}

TensorDict batch(const nets::NetSpec& spec, int rank, std::vector<bool> heads = {}) {
  if (heads.empty()) heads.assign(spec.heads, true);
  return nets::make_batch(spec, 3, 100 + rank, heads);
}

void backward(MMDistributedDataParallel& ddp, const TensorDict& data) {
  ddp.forward(data, ForwardMode::kLoss).at("loss").backward();
}

// The gradient each rank would compute alone, for a model in `net`'s state.
std::map<std::string, at::Tensor> local_gradients(nets::TestNet& net, const nets::NetSpec& spec,
                                                  const TensorDict& data) {
  auto copy = nets::make_net(spec);
  nets::copy_state(net, *copy);
  copy->forward(data, ForwardMode::kLoss).at("loss").backward();
  std::map<std::string, at::Tensor> grads;
  for (const auto& item : copy->named_parameters()) grads[item.key()] = item.value().grad();
  return grads;
}

class DdpGradients : public testing::TestWithParam<bool> {};

TEST_P(DdpGradients, AreTheAverageOfTheRanksGradients) {
  const auto spec = mlp({5, 3});
  const int world = 3;
  std::vector<std::map<std::string, at::Tensor>> local(world), synced(world);
  harness::run_ranks(world, [&](int rank) {
    auto net = nets::make_net(spec);
    DDPOptions options;
    options.gradient_as_bucket_view = GetParam();
    options.bucket_cap_mb = 100.0 / (1 << 20);
    MMDistributedDataParallel ddp(net, options);
    local[rank] = local_gradients(*net, spec, batch(spec, rank));
    backward(ddp, batch(spec, rank));
    for (const auto& item : net->named_parameters()) synced[rank][item.key()] = item.value().grad();
  });
  for (const auto& [name, grad] : synced[0]) {
    at::Tensor expected = (local[0][name] + local[1][name] + local[2][name]) / 3;
    EXPECT_TRUE(torch::allclose(grad, expected, 1e-12, 1e-12)) << name;
    EXPECT_FALSE(torch::allclose(grad, local[0][name])) << name << " was not synchronised";
    for (int r = 1; r < world; ++r) EXPECT_TRUE(torch::equal(synced[r][name], grad)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(CopyAndBucketView, DdpGradients, testing::Bool());

TEST(Ddp, BucketAllReducesStartWhileBackwardIsStillRunning) {
  const auto spec = mlp({8, 8, 8});
  harness::run_ranks(2, [&](int rank) {
    auto net = nets::make_net(spec);
    std::vector<std::string> events;
    DDPOptions options;
    options.bucket_cap_mb = 64.0 / (1 << 20);  // a bucket per parameter or two
    options.on_bucket_launch = [&](size_t bucket, const std::vector<size_t>&) {
      events.push_back("launch " + std::to_string(bucket));
    };
    MMDistributedDataParallel ddp(net, options);
    // The first layer's weight gradient is among the last that backward computes.
    net->named_parameters()["trunk0.weight"].register_hook([&](const at::Tensor& grad) {
      events.push_back("first layer gradient");
      return grad;
    });
    backward(ddp, batch(spec, rank));
    auto first_layer = std::find(events.begin(), events.end(), "first layer gradient");
    ASSERT_NE(first_layer, events.end());
    EXPECT_EQ(events.front(), "launch 0");
    EXPECT_GT(std::count_if(events.begin(), first_layer,
                            [](const std::string& e) { return e.rfind("launch", 0) == 0; }),
              1);
  });
}

// Registers the layer it uses last first, so that backward reaches the
// parameters in another order than the reverse of registration.
class UsesFirstRegisteredLast : public engine::model::BaseModel {
 public:
  UsesFirstRegisteredLast() {
    last = register_module("last", torch::nn::Linear(3, 1));
    first = register_module("first", torch::nn::Linear(3, 3));
    to(torch::kDouble);
  }
  TensorDict forward(const TensorDict& data, ForwardMode) override {
    return {{"loss", last(torch::tanh(first(data.at("inputs")))).sum()}};
  }
  torch::nn::Linear last{nullptr}, first{nullptr};
};

TEST(Ddp, BucketOrderIsRebuiltFromTheFirstBackwardOnEveryRank) {
  std::vector<std::vector<std::vector<size_t>>> before(2), after(2);
  harness::run_ranks(2, [&](int rank) {
    auto model = std::make_shared<UsesFirstRegisteredLast>();
    DDPOptions options;
    options.bucket_cap_mb = 1.0 / (1 << 20);  // one parameter per bucket
    MMDistributedDataParallel ddp(model, options);
    before[rank] = ddp.reducer().buckets();
    TensorDict data{{"inputs", torch::full({2, 3}, double(rank + 1), torch::kDouble)}};
    ddp.forward(data, ForwardMode::kLoss).at("loss").backward();
    after[rank] = ddp.reducer().buckets();
  });
  // Parameters: 0 last.weight, 1 last.bias, 2 first.weight, 3 first.bias.
  using Buckets = std::vector<std::vector<size_t>>;
  EXPECT_EQ(before[0], (Buckets{{3}, {2}, {1}, {0}}));
  EXPECT_EQ(after[0], after[1]);
  std::set<size_t> first_two{after[0][0][0], after[0][1][0]};
  EXPECT_EQ(first_two, (std::set<size_t>{0, 1})) << "the last layer's gradients arrive first";
}

TEST(DdpLogging, ReportsTheBucketsBeforeAndAfterTheRebuildAndTheReadyOrder) {
  std::vector<engine::model::DDPLoggingData> before(2), after(2);
  std::vector<std::vector<std::vector<size_t>>> buckets(2);
  harness::run_ranks(2, [&](int rank) {
    auto model = std::make_shared<UsesFirstRegisteredLast>();
    DDPOptions options;
    options.bucket_cap_mb = 1.0 / (1 << 20);  // one parameter per bucket
    MMDistributedDataParallel ddp(model, options);
    before[rank] = engine::model::ddp_logging_data(ddp);
    TensorDict data{{"inputs", torch::full({2, 3}, double(rank + 1), torch::kDouble)}};
    for (int step = 0; step < 2; ++step)
      ddp.forward(data, ForwardMode::kLoss).at("loss").backward();
    after[rank] = engine::model::ddp_logging_data(ddp);
    buckets[rank] = ddp.reducer().buckets();
  });
  // Parameters: 0 last.weight (3), 1 last.bias (1), 2 first.weight (9), 3
  // first.bias (3), float64; first in reverse order.
  EXPECT_EQ(before[0].bucket_sizes, (std::vector<int64_t>{24, 72, 8, 24}));
  EXPECT_FALSE(before[0].has_rebuilt_buckets);
  EXPECT_EQ(before[0].iteration, 0);
  EXPECT_EQ(before[0].num_parameter_tensors, 4);
  EXPECT_EQ(before[0].total_parameter_size_bytes, 128);
  EXPECT_EQ(before[0].dtypes, (std::vector<std::string>{"Double"}));
  for (int rank = 0; rank < 2; ++rank) {
    const auto& data = after[rank];
    EXPECT_EQ(data.rank, rank);
    EXPECT_EQ(data.world_size, 2);
    EXPECT_EQ(data.backend_name, "sim");
    EXPECT_EQ(data.iteration, 2);
    EXPECT_TRUE(data.has_rebuilt_buckets);
    EXPECT_EQ(data.rebuilt_per_bucket_param_indices, buckets[rank]);
    std::vector<int64_t> sizes;
    for (const auto& bucket : buckets[rank])
      sizes.push_back(std::vector<int64_t>{24, 8, 72, 24}[bucket[0]]);
    EXPECT_EQ(data.rebuilt_bucket_sizes, sizes);
    // Backward reaches the last layer first.
    ASSERT_EQ(data.gradient_ready_order.size(), 4u);
    EXPECT_EQ(
        std::set<size_t>(data.gradient_ready_order.begin(), data.gradient_ready_order.begin() + 2),
        (std::set<size_t>{0, 1}));
    EXPECT_TRUE(data.unused_parameters.empty());
    // Communication ends after the last gradient, so what overlaps the
    // backward is part of it.
    EXPECT_GE(data.avg_backward_comm_time, data.avg_backward_compute_comm_overlap_time);
    EXPECT_GE(data.avg_backward_compute_comm_overlap_time, 0);
    EXPECT_GT(data.avg_forward_compute_time, 0);
    EXPECT_GT(data.avg_backward_compute_time, 0);
    const auto json = data.to_json();
    EXPECT_EQ(json.at("rebuilt_per_bucket_param_indices").size(), 4u);
    EXPECT_EQ(json.at("iteration"), 2);
    EXPECT_NE(data.summary().find("4 buckets (0.00, 0.00, 0.00, 0.00 MB), rebuilt as 4"),
              std::string::npos)
        << data.summary();
  }
}

TEST(DdpLogging, NamesTheParametersTheLastBackwardLeftUnused) {
  const auto spec = mlp({4}, 3);
  std::vector<engine::model::DDPLoggingData> data(2);
  harness::run_ranks(2, [&](int rank) {
    auto net = nets::make_net(spec);
    DDPOptions options;
    options.find_unused_parameters = true;
    options.comm_hook = engine::model::allreduce_hook();
    MMDistributedDataParallel ddp(net, options);
    backward(ddp, batch(spec, rank, {true, rank == 1, false}));
    data[rank] = engine::model::ddp_logging_data(ddp);
  });
  // head k: a 2 x 4 weight and a bias of 2, float64.
  EXPECT_EQ(data[0].unused_parameters,
            (std::vector<std::string>{"head1.weight", "head1.bias", "head2.weight", "head2.bias"}));
  EXPECT_EQ(data[0].unused_parameter_size, 2 * (8 + 2) * 8);
  EXPECT_EQ(data[1].unused_parameters, (std::vector<std::string>{"head2.weight", "head2.bias"}));
  EXPECT_EQ(data[1].comm_hook, "allreduce");
  EXPECT_FALSE(data[1].has_rebuilt_buckets) << "find_unused_parameters keeps the first layout";
}

TEST(Ddp, NoSyncKeepsGradientsLocalAndTheNextSyncedBackwardAveragesTheSums) {
  const auto spec = mlp({4});
  const int world = 2;
  std::vector<std::map<std::string, at::Tensor>> local(world), inside(world), synced(world);
  harness::run_ranks(world, [&](int rank) {
    auto net = nets::make_net(spec);
    MMDistributedDataParallel ddp(net, {});
    local[rank] = local_gradients(*net, spec, batch(spec, rank));
    {
      auto scope = ddp.no_sync();
      backward(ddp, batch(spec, rank));
    }
    for (const auto& item : net->named_parameters())
      inside[rank][item.key()] = item.value().grad().clone();
    backward(ddp, batch(spec, rank));
    for (const auto& item : net->named_parameters()) synced[rank][item.key()] = item.value().grad();
  });
  for (const auto& [name, grad] : local[0]) {
    EXPECT_TRUE(torch::allclose(inside[0][name], local[0][name], 1e-12, 1e-12)) << name;
    EXPECT_TRUE(torch::allclose(inside[1][name], local[1][name], 1e-12, 1e-12)) << name;
    at::Tensor expected = (2 * local[0][name] + 2 * local[1][name]) / 2;
    EXPECT_TRUE(torch::allclose(synced[0][name], expected, 1e-12, 1e-12)) << name;
    EXPECT_TRUE(torch::equal(synced[1][name], synced[0][name])) << name;
  }
}

TEST(Ddp, AParameterWithoutGradientIsAnErrorNamingItUnlessFindUnusedParameters) {
  const auto spec = mlp({4}, 2);
  harness::run_ranks(2, [&](int rank) {
    auto net = nets::make_net(spec);
    MMDistributedDataParallel ddp(net, {});
    try {
      backward(ddp, batch(spec, rank, {true, false}));
      ADD_FAILURE() << "no error for a parameter without gradient";
    } catch (const engine::dist::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("head1.weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("find_unused_parameters=true"), std::string::npos);
    }
  });
}

TEST(Ddp, FindUnusedParametersLeavesGloballyUnusedGradientsUndefined) {
  const auto spec = mlp({4}, 3);
  harness::run_ranks(3, [&](int rank) {
    auto net = nets::make_net(spec);
    DDPOptions options;
    options.find_unused_parameters = true;
    MMDistributedDataParallel ddp(net, options);
    // head0 on every rank, head1 on rank 1 only, head2 nowhere.
    backward(ddp, batch(spec, rank, {true, rank == 1, false}));
    auto params = net->named_parameters();
    EXPECT_TRUE(params["head0.weight"].grad().defined());
    EXPECT_TRUE(params["head1.weight"].grad().defined()) << "used on rank 1: averaged everywhere";
    EXPECT_FALSE(params["head2.weight"].grad().defined());
  });
}

// The members of `members` (of a world of `world`) wrap a model whose shape
// differs on rank `odd`: every member gets an error naming it and the
// group's first rank by their world ranks.
void expect_shape_mismatch_named(int world, const std::vector<int>& members, int odd) {
  harness::run_ranks(world, [&](int rank) {
    DDPOptions options;
    if (static_cast<int>(members.size()) < world) {
      options.process_group = engine::dist::new_group(members);
    }
    if (!std::binary_search(members.begin(), members.end(), rank)) return;
    auto net = nets::make_net(mlp({rank == odd ? 5 : 4}));
    try {
      MMDistributedDataParallel ddp(net, options);
      ADD_FAILURE() << "no error for different shapes";
    } catch (const engine::dist::InvalidArgument& e) {
      const std::string message = e.what();
      const std::string odd_side = "\"trunk0.weight\" [5, 4] Double on rank " +
                                   std::to_string(odd) + " but \"trunk0.weight\" [4, 4] Double";
      EXPECT_NE(message.find(odd_side + " on rank " + std::to_string(members.front()) + "\n"),
                std::string::npos)
          << message;
      EXPECT_EQ(message.rfind("[rank " + std::to_string(rank) + "]", 0), 0u) << message;
    }
  });
}

TEST(Ddp, DifferentParameterShapesAcrossRanksAreAnErrorOnEveryRank) {
  expect_shape_mismatch_named(2, {0, 1}, 1);
}

TEST(Ddp, OnASubgroupTheShapeErrorNamesTheRanksByTheirWorldRanks) {
  expect_shape_mismatch_named(4, {1, 3}, 3);
}

TEST(Ddp, DetectAnomalousParamsReportsWhatTheLossDoesNotReach) {
  const auto spec = mlp({4}, 2);
  harness::run_ranks(2, [&](int rank) {
    auto net = nets::make_net(spec);
    DDPOptions options;
    options.detect_anomalous_params = true;
    options.find_unused_parameters = true;
    auto ddp = std::make_shared<MMDistributedDataParallel>(net, options);
    engine::optim::OptimWrapper optim(
        std::make_shared<torch::optim::SGD>(ddp->parameters(), torch::optim::SGDOptions(0.1)));
    ddp->train_step(batch(spec, rank, {false, true}), optim);
    EXPECT_EQ(ddp->anomalous_params(), (std::vector<std::string>{"head0.weight", "head0.bias"}));
  });
}

// A model whose forward gives its buffer new storage rather than updating it
// in place (C++'s counterpart of reassigning a buffer attribute).
class ReassignsBuffer : public engine::model::BaseModel {
 public:
  ReassignsBuffer() {
    weight_ = register_parameter("weight", torch::ones({1}, torch::kDouble));
    seen_ = register_buffer("seen", torch::zeros({1}, torch::kDouble));
  }
  TensorDict forward(const TensorDict& data, ForwardMode) override {
    at::Tensor before = seen_.clone();
    seen_.set_data(seen_ + data.at("inputs").sum());
    return {{"loss", (weight_ * before).sum() + (weight_ * data.at("inputs")).sum()}};
  }

 private:
  at::Tensor weight_, seen_;
};

TEST(Ddp, BroadcastBuffersSendsRankZerosBuffersEvenAfterTheyWereReassigned) {
  for (bool broadcast : {true, false}) {
    std::vector<double> seen(2);
    harness::run_ranks(2, [&](int rank) {
      auto model = std::make_shared<ReassignsBuffer>();
      DDPOptions options;
      options.broadcast_buffers = broadcast;
      MMDistributedDataParallel ddp(model, options);
      TensorDict data{{"inputs", torch::full({1}, 10.0 * (rank + 1), torch::kDouble)}};
      ddp.forward(data, ForwardMode::kLoss).at("loss").backward();  // seen: 10 or 20
      ddp.forward(data, ForwardMode::kLoss).at("loss").backward();  // broadcast, then +10/+20
      seen[rank] = model->named_buffers()["seen"].item<double>();
    });
    if (broadcast) {
      EXPECT_EQ(seen, (std::vector<double>{20, 30}));
    } else {
      EXPECT_EQ(seen, (std::vector<double>{20, 40}));
    }
  }
}

// Two trainable children and one without parameters, as a GAN has.
class TwoParts : public engine::model::BaseModel {
 public:
  TwoParts() {
    generator = register_module("generator", torch::nn::Linear(3, 3));
    discriminator = register_module("discriminator", torch::nn::Linear(3, 1));
    activation = register_module("activation", torch::nn::Tanh());
    to(torch::kDouble);
  }
  TensorDict forward(const TensorDict& data, ForwardMode) override {
    return {{"loss", discriminator(activation(generator(data.at("inputs")))).sum()}};
  }
  torch::nn::Linear generator{nullptr}, discriminator{nullptr};
  torch::nn::Tanh activation{nullptr};
};

TEST(SeparateDdp, EachTrainableChildGetsAReducerAndNoSyncWorksWithTwoChildren) {
  std::vector<at::Tensor> inside(2), synced(2);
  harness::run_ranks(2, [&](int rank) {
    auto model = std::make_shared<TwoParts>();
    engine::model::MMSeparateDistributedDataParallel wrapper(model, {});
    EXPECT_EQ(wrapper.reducers().size(), 2u);
    EXPECT_TRUE(wrapper.reducers().count("generator") && wrapper.reducers().count("discriminator"));
    TensorDict data{{"inputs", torch::full({2, 3}, double(rank + 1), torch::kDouble)}};
    {
      auto scope = wrapper.no_sync();
      model->forward(data, ForwardMode::kLoss).at("loss").backward();
    }
    inside[rank] = model->generator->bias.grad().clone();
    model->zero_grad();
    auto* generator_sync = engine::optim::grad_sync_of(model->generator.get());
    ASSERT_NE(generator_sync, nullptr);
    EXPECT_TRUE(generator_sync->grad_sync_enabled());
    model->forward(data, ForwardMode::kLoss).at("loss").backward();
    synced[rank] = model->generator->bias.grad().clone();
  });
  EXPECT_FALSE(torch::equal(inside[0], inside[1])) << "no_sync still synchronised";
  EXPECT_TRUE(torch::equal(synced[0], synced[1]));
  EXPECT_TRUE(torch::allclose(synced[0], (inside[0] + inside[1]) / 2, 1e-12, 1e-12));
}

TEST(ModelWrappers, IsModelWrapperKnowsTheWrappers) {
  harness::run_ranks(1, [&](int) {
    auto net = nets::make_net(mlp({2}));
    MMDistributedDataParallel ddp(net, {});
    engine::model::MMSeparateDistributedDataParallel separate(std::make_shared<TwoParts>(), {});
    EXPECT_TRUE(engine::model::is_model_wrapper(ddp));
    EXPECT_TRUE(engine::model::is_model_wrapper(separate));
    EXPECT_FALSE(engine::model::is_model_wrapper(*net));
    EXPECT_TRUE(ddp.named_parameters().contains("module.trunk0.weight"));
  });
}

}  // namespace
