// Deferred initialisation under MMFullyShardedDataParallel: a deferred model
// is allocated and initialised one module at a time, each unit sharded
// before the next exists, and ends as the same model initialised eagerly;
// param_init_fn, device_id and cpu_offload from code and from config.
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full_like.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/model/init/deferred.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/model/wrappers/wrapper_registry.h"
#include "engine/optim/optim_wrapper.h"
#include "engine/registry/config.h"
#include "testing/harness.h"
#include "testing/model/nets.h"

namespace {

using engine::model::FSDPOptions;
using engine::model::MMFullyShardedDataParallel;
using engine::model::init::defer;
using engine::model::init::deferred_names;

// Every layer 4x4 (2 rows per rank at 2 ranks), a BatchNorm with buffers.
nets::NetSpec spec() {
  nets::NetSpec spec;
  spec.inputs = 4;
  spec.trunk = {4, 4};
  spec.outputs = 4;
  spec.batch_norm = true;
  return spec;
}

// Exact values that depend on the tensor's shape and name and on `offset`,
// never on the order the modules are initialised in.
void fill(torch::nn::Module& module, double offset) {
  c10::NoGradGuard no_grad;
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    at::Tensor value = item.value();
    value.copy_(at::arange(value.numel(), value.options()).reshape(value.sizes()) / 8 + offset);
  }
  for (const auto& item : module.named_buffers(/*recurse=*/false)) {
    at::Tensor value = item.value();
    value.fill_(item.key() == "running_var" ? 1 : 0);
  }
}

std::shared_ptr<nets::TestNet> filled_net(double offset) {
  auto net = nets::make_net(spec());
  fill(*net, offset);
  for (const auto& module : net->modules(/*include_self=*/false)) fill(*module, offset);
  return net;
}

FSDPOptions layer_units() {
  FSDPOptions options;
  options.auto_wrap_policy.module_types = {"Linear"};
  return options;
}

std::map<std::string, at::Tensor> train_two_steps(MMFullyShardedDataParallel& fsdp, int rank) {
  engine::optim::OptimWrapper optim(
      std::make_shared<torch::optim::SGD>(fsdp.parameters(), torch::optim::SGDOptions(0.1)));
  for (int step = 0; step < 2; ++step) {
    fsdp.train_step(nets::make_batch(spec(), 3, rank * 10 + step, {true}), optim);
  }
  return fsdp.full_parameters();
}

void expect_equal(const std::map<std::string, at::Tensor>& got,
                  const std::map<std::string, at::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, value] : want) EXPECT_TRUE(at::equal(got.at(name), value)) << name;
}

// When param_init_fn runs for a module, every other parameter of the model
// is either still deferred or already a shard: no two modules' parameters
// are ever whole at once. The model that results equals the same model
// initialised eagerly, at construction and after training.
TEST(DeferredInit, ModulesAreInitialisedOneAtATimeEachUnitShardedBeforeTheNext) {
  const auto reference = filled_net(0.25);
  std::map<std::string, std::vector<int64_t>> full_shapes;
  for (const auto& item : reference->named_parameters()) {
    full_shapes[item.key()] = item.value().sizes().vec();
  }
  harness::run_ranks(2, [&](int rank) {
    auto net = nets::make_net(spec());
    defer(*net);
    ASSERT_EQ(deferred_names(*net).size(), 11u);  // 4 weights, 4 biases, 3 buffers
    std::vector<std::string> whole_elsewhere;
    int calls = 0;
    FSDPOptions options = layer_units();
    options.param_init_fn = [&](torch::nn::Module& module) {
      ++calls;
      std::set<const c10::TensorImpl*> own;
      for (const auto& param : module.parameters(/*recurse=*/false)) {
        own.insert(param.unsafeGetTensorImpl());
      }
      for (const auto& item : net->named_parameters()) {
        const at::Tensor& param = item.value();
        if (own.count(param.unsafeGetTensorImpl()) || param.is_meta()) continue;
        if (param.sizes().vec() == full_shapes.at(item.key()))
          whole_elsewhere.push_back(item.key());
      }
      fill(module, 0.25);
    };
    MMFullyShardedDataParallel fsdp(net, options);
    EXPECT_EQ(calls, 4);  // three Linear layers and the BatchNorm
    EXPECT_TRUE(whole_elsewhere.empty()) << whole_elsewhere.front();
    EXPECT_TRUE(deferred_names(*net).empty());
    expect_equal(fsdp.full_parameters(), nets::snapshot(*reference));
    for (const auto& item : net->named_buffers()) {
      EXPECT_TRUE(at::equal(item.value(), reference->named_buffers()[item.key()])) << item.key();
    }

    auto eager = nets::make_net(spec());
    nets::copy_state(*reference, *eager);
    MMFullyShardedDataParallel eager_fsdp(eager, layer_units());
    expect_equal(train_two_steps(fsdp, rank), train_two_steps(eager_fsdp, rank));
  });
}

// Each rank initialises its own values; with sync_module_states every rank
// ends with the first rank's, unit by unit and for the buffers too.
TEST(DeferredInit, SyncModuleStatesGivesEveryRankTheFirstRanksValues) {
  const auto first_ranks = filled_net(0.5);
  harness::run_ranks(3, [&](int rank) {
    auto net = nets::make_net(spec());
    defer(*net);
    FSDPOptions options = layer_units();
    options.sync_module_states = true;
    options.param_init_fn = [rank](torch::nn::Module& module) { fill(module, 0.5 + rank); };
    MMFullyShardedDataParallel fsdp(net, options);
    expect_equal(fsdp.full_parameters(), nets::snapshot(*first_ranks));
  });
}

template <typename Body>
std::string error_of(Body body) {
  try {
    body();
  } catch (const engine::dist::InvalidArgument& error) {
    return error.what();
  }
  return "no error";
}

TEST(DeferredInit, MistakesAreNamed) {
  harness::run_ranks(2, [](int rank) {
    auto deferred = nets::make_net(spec());
    defer(*deferred);
    const auto uninitialised =
        error_of([&] { MMFullyShardedDataParallel(deferred, layer_units()); });
    EXPECT_NE(uninitialised.find("[rank " + std::to_string(rank) +
                                 "] MMFullyShardedDataParallel: \"trunk0.weight\" and 10 other "
                                 "tensor(s) of the module are deferred (meta) and nothing "
                                 "initialises them; give param_init_fn"),
              std::string::npos)
        << uninitialised;

    auto running = nets::make_net(spec());
    const auto outputs =
        running->forward(nets::make_batch(spec(), 2, 0, {true}), engine::model::ForwardMode::kLoss);
    EXPECT_NE(error_of([&] { defer(*running); }).find("is in an autograd graph still alive"),
              std::string::npos);
  });
}

// Parameters on the CPU already are where cpu_offload puts them: it trains
// as without it. A CUDA device_id is refused where there is no CUDA.
TEST(DeferredInit, DeviceIdAndCpuOffloadOnTheCpu) {
  const auto initial = filled_net(0.125);
  harness::run_ranks(2, [&](int rank) {
    auto plain_net = nets::make_net(spec());
    auto offload_net = nets::make_net(spec());
    nets::copy_state(*initial, *plain_net);
    nets::copy_state(*initial, *offload_net);
    FSDPOptions offload = layer_units();
    offload.cpu_offload = true;
    offload.device_id = c10::Device(c10::kCPU);
    MMFullyShardedDataParallel plain(plain_net, layer_units());
    MMFullyShardedDataParallel offloaded(offload_net, offload);
    expect_equal(train_two_steps(offloaded, rank), train_two_steps(plain, rank));

    if (at::hasCUDA()) return;
    FSDPOptions cuda = layer_units();
    cuda.device_id = c10::Device(c10::kCUDA, 0);
    EXPECT_NE(error_of([&] {
                MMFullyShardedDataParallel(nets::make_net(spec()), cuda);
              }).find("device_id is cuda:0 but this process has no CUDA device"),
              std::string::npos);
  });
}

std::shared_ptr<engine::model::ModelWrapper> build(const engine::registry::Json& config,
                                                   std::shared_ptr<nets::TestNet> net) {
  return engine::model::model_wrappers().build(config, std::move(net));
}

// mmengine's keys: param_init_fn names a FUNCTIONS entry (its arguments
// applied), device_id and cpu_offload as mmengine and PyTorch write them.
TEST(DeferredInit, TheKeysAreReadAsMmengineWritesThem) {
  harness::run_ranks(2, [](int) {
    const engine::registry::Json base = {
        {"type", "MMFullyShardedDataParallel"},
        {"auto_wrap_policy", {{"type", "ModuleWrapPolicy"}, {"module_classes", {"Linear"}}}},
        {"device_id", "cpu"},
        {"cpu_offload", {{"offload_params", true}}}};
    auto config = base;
    config["param_init_fn"] = {{"type", "constant_init"}, {"val", 0.5}, {"bias", 0.25}};
    auto net = nets::make_net(spec());
    defer(*net);
    auto fsdp = std::dynamic_pointer_cast<MMFullyShardedDataParallel>(build(config, net));
    ASSERT_NE(fsdp, nullptr);
    EXPECT_TRUE(fsdp->options().cpu_offload);
    EXPECT_EQ(fsdp->options().device_id, c10::Device(c10::kCPU));
    for (const auto& [name, value] : fsdp->full_parameters()) {
      if (name.rfind("trunk", 0) != 0 && name.rfind("head", 0) != 0) continue;
      const double want = name.find("weight") != std::string::npos ? 0.5 : 0.25;
      EXPECT_TRUE(at::equal(value, at::full_like(value, want))) << name;
    }

    auto error = [&](const char* key, const engine::registry::Json& value) {
      auto wrong = base;
      wrong[key] = value;
      try {
        build(wrong, nets::make_net(spec()));
      } catch (const engine::registry::ConfigError& error) {
        return std::string(error.what());
      }
      return std::string("no error");
    };
    EXPECT_NE(error("param_init_fn", "no_such_init")
                  .find("FUNCTIONS has the unknown type "
                        "\"no_such_init\"; known types: "
                        "constant_init, kaiming_init"),
              std::string::npos);
    EXPECT_NE(error("param_init_fn", 3).find("must be a FUNCTIONS name or a config object"),
              std::string::npos);
    EXPECT_NE(error("device_id", "gpu0").find("key \"device_id\" names no device: \"gpu0\""),
              std::string::npos);
    EXPECT_NE(error("cpu_offload", {{"offload", true}}).find("has unknown key(s) offload"),
              std::string::npos);
    EXPECT_NE(error("hybrid_shard_size", -1)
                  .find("key \"hybrid_shard_size\" must be a whole number from 0 to 2147483647"),
              std::string::npos);
    // A CUDA index is a c10::DeviceIndex (8 bits): beyond it, not wrapped.
    for (int index : {-1, 128, 65536}) {
      EXPECT_NE(
          error("device_id", index).find("key \"device_id\" must be a whole number from 0 to 127"),
          std::string::npos)
          << index;
    }
  });
}

}  // namespace
