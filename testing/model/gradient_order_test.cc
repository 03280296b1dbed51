// The gradient reductions of DDP and of the sharded wrappers, on floats whose
// sums depend on the order they are added in. Every rank ends with the same
// bits, and since the simulator reduces in rank order, they are exactly the
// rank-order sum of the ranks' gradients each divided by the world size (for
// HYBRID_SHARD: within each shard group, then across the replica groups).
// Exact inputs, as in the equivalence properties, cannot tell one order of
// reduction from another.
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>

#include "engine/model/base_model.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/model/wrappers/zero_data_parallel.h"
#include "engine/optim/optim_wrapper.h"
#include "testing/cases.h"
#include "testing/harness.h"

namespace {

using engine::model::ForwardMode;
using engine::model::TensorDict;

constexpr int kRanks = 6;
constexpr int kHybridShardSize = 3;

// One float32 parameter `w`, zero; the loss w·x has the gradient x.
class ZeroDot : public engine::model::BaseModel {
 public:
  explicit ZeroDot(int64_t count) { w = register_parameter("w", torch::zeros({count})); }
  TensorDict forward(const TensorDict& data, ForwardMode) override {
    return {{"loss", (w * data.at("x")).sum()}};
  }
  at::Tensor w;
};

std::shared_ptr<engine::model::ModelWrapper> wrap(const std::string& wrapper,
                                                  std::shared_ptr<ZeroDot> model) {
  if (wrapper == "DDP" || wrapper == "DDP_BUCKET_VIEW") {
    engine::model::DDPOptions options;
    options.gradient_as_bucket_view = wrapper == "DDP_BUCKET_VIEW";
    return std::make_shared<engine::model::MMDistributedDataParallel>(model, options);
  }
  if (wrapper == "ZERO_1" || wrapper == "ZERO_2") {
    engine::model::ZeroOptions options;
    options.stage = wrapper == "ZERO_1" ? 1 : 2;
    return std::make_shared<engine::model::MMZeroDataParallel>(model, options);
  }
  engine::model::FSDPOptions options;
  options.sharding_strategy = engine::model::parse_sharding_strategy(wrapper);
  if (wrapper == "HYBRID_SHARD") options.hybrid_shard_size = kHybridShardSize;
  return std::make_shared<engine::model::MMFullyShardedDataParallel>(model, options);
}

// One step of SGD with lr 1 from w = 0 leaves exactly -gradient in w.
at::Tensor reduced_gradient(const std::string& wrapper, const at::Tensor& x) {
  auto model = std::make_shared<ZeroDot>(x.numel());
  auto wrapped = wrap(wrapper, model);
  engine::optim::OptimWrapper optim(
      std::make_shared<torch::optim::SGD>(wrapped->parameters(), torch::optim::SGDOptions(1.0)),
      {});
  wrapped->train_step({{"x", x}}, optim);
  if (auto* sharded = dynamic_cast<engine::model::MMFullyShardedDataParallel*>(wrapped.get())) {
    return -sharded->full_parameters().at("w");
  }
  return -model->w.detach().clone();
}

// The gradients divided by the world size, summed in rank order within
// groups of `group_size` consecutive ranks, then the groups' sums in order.
at::Tensor rank_order_mean(const std::vector<at::Tensor>& grads, int group_size) {
  const int world = static_cast<int>(grads.size());
  std::vector<at::Tensor> group_sums;
  for (int first = 0; first < world; first += group_size) {
    std::vector<at::Tensor> divided;
    for (int r = first; r < first + group_size; ++r) divided.push_back(grads[r] / world);
    group_sums.push_back(cases::sum_in_order(divided));
  }
  return cases::sum_in_order(group_sums);
}

class GradientOrder : public testing::TestWithParam<std::string> {};

TEST_P(GradientOrder, EveryRankGetsTheRankOrderMeanBitForBit) {
  const std::string wrapper = GetParam();
  const int group_size = wrapper == "HYBRID_SHARD" ? kHybridShardSize : kRanks;
  bool orders_differ = false;
  for (const int64_t count : {int64_t{1}, int64_t{5}, int64_t{1000}, int64_t{1} << 16}) {
    SCOPED_TRACE("elements " + std::to_string(count));
    std::vector<at::Tensor> grads;
    for (int r = 0; r < kRanks; ++r) grads.push_back(cases::order_sensitive_floats(r, count));
    const at::Tensor expected = rank_order_mean(grads, group_size);
    // Another order to tell from the expected one: the reverse, or for
    // HYBRID_SHARD (whose pairs sum alike either way) one flat sum.
    const std::vector<at::Tensor> reversed(grads.rbegin(), grads.rend());
    const at::Tensor other = group_size < kRanks ? rank_order_mean(grads, kRanks)
                                                 : rank_order_mean(reversed, group_size);
    orders_differ |= !at::equal(expected, other);
    const auto results = harness::collect_ranks<at::Tensor>(
        kRanks, [&](int rank) { return reduced_gradient(wrapper, grads[rank]); });
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_TRUE(cases::bit_equal(results[r], expected)) << "rank " << r;
    }
  }
  EXPECT_TRUE(orders_differ) << "the inputs cannot tell one order from another";
}

INSTANTIATE_TEST_SUITE_P(Wrappers, GradientOrder,
                         testing::Values("DDP", "DDP_BUCKET_VIEW", "FULL_SHARD", "SHARD_GRAD_OP",
                                         "NO_SHARD", "HYBRID_SHARD", "ZERO_1", "ZERO_2"));

}  // namespace
