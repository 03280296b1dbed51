// MMDistributedDataParallel's behaviour beyond equivalence: averaging, bucket
// order and overlap, buffers, no_sync, unused parameters, errors, wrappers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>

#include "engine/dist/errors.h"
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

}  // namespace
