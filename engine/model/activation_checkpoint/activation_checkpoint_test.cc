// checkpoint() against the same forward run plainly: gradients, buffers and
// the generators' next draws bit for bit, through dropout, BatchNorm,
// autocast and nesting; and the graph it leaves holds nothing of the body.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function.h>
#include <torch/cuda.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <memory>
#include <optional>
#include <vector>

#include "engine/compat/autocast.h"
#include "engine/dist/errors.h"
#include "engine/model/activation_checkpoint/checkpoint.h"
#include "engine/model/activation_checkpoint/checkpointed_modules.h"
#include "engine/model/batch_norm.h"
#include "engine/model/unit_call.h"

namespace engine::model {
namespace {

// Linear, BatchNorm, dropout from the default generator, tanh, dropout from
// a generator of its own, Linear.
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(at::Generator generator) : Module("Block"), generator_(std::move(generator)) {
    first = register_module("first", torch::nn::Linear(6, 8));
    norm = register_module("norm", BatchNorm(BatchNormOptions(8)));
    second = register_module("second", torch::nn::Linear(8, 5));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = torch::dropout(norm->forward(first->forward(x)), 0.5, is_training());
    h = torch::tanh(h) * at::bernoulli(at::full_like(h, 0.5), generator_) * 2;
    ++calls;
    return second->forward(h);
  }
  torch::nn::Linear first{nullptr};
  BatchNorm norm{nullptr};
  torch::nn::Linear second{nullptr};
  int calls = 0;

 private:
  at::Generator generator_;
};
TORCH_MODULE(Block);

// Everything a backward leaves behind, to compare bit for bit.
struct Outcome {
  std::vector<at::Tensor> tensors;
  int calls = 0;
};

void expect_identical(const Outcome& plain, const Outcome& checkpointed) {
  ASSERT_EQ(plain.tensors.size(), checkpointed.tensors.size());
  for (size_t i = 0; i < plain.tensors.size(); ++i) {
    EXPECT_TRUE(at::equal(plain.tensors[i], checkpointed.tensors[i])) << "tensor " << i;
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  CheckpointTest() : generator_(at::make_generator<at::CPUGeneratorImpl>(11)) {
    torch::manual_seed(5);
    block_ = Block(generator_);
    input_ = torch::randn({7, 6}).requires_grad_();
  }

  // One forward of the block through `run` and one backward, from fixed
  // generator states; returns the gradients, buffers and next draws.
  Outcome step(const std::function<at::Tensor(const at::Tensor&)>& run) {
    torch::manual_seed(99);
    generator_.set_current_seed(7);
    block_->zero_grad();
    input_.mutable_grad() = at::Tensor();
    const int calls_before = block_->calls;
    at::Tensor loss = (run(input_) * at::arange(5, at::kFloat)).sum();
    loss.backward();
    Outcome out;
    out.tensors.push_back(input_.grad().clone());
    for (const auto& param : block_->parameters()) out.tensors.push_back(param.grad().clone());
    for (const auto& buffer : block_->buffers()) out.tensors.push_back(buffer.clone());
    out.tensors.push_back(torch::rand({3}));
    out.tensors.push_back(at::rand({3}, generator_));
    out.calls = block_->calls - calls_before;
    return out;
  }

  at::Tensor plain(const at::Tensor& x) { return block_->forward(x); }
  at::Tensor checkpointed(const at::Tensor& x, CheckpointOptions options) {
    BlockImpl* block = block_.get();
    return checkpoint(
        *block_, x, [block](const at::Tensor& in) { return block->forward(in); }, options);
  }
  CheckpointOptions own_generator() {
    CheckpointOptions options;
    options.generators = {generator_};
    return options;
  }
  // Restores parameters and buffers to what the fixture built.
  void reset_state() {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < initial_.size(); ++i) state()[i].copy_(initial_[i]);
  }
  std::vector<at::Tensor> state() {
    auto out = block_->parameters();
    for (const auto& buffer : block_->buffers()) out.push_back(buffer);
    return out;
  }
  void SetUp() override {
    for (const auto& t : state()) initial_.push_back(t.detach().clone());
  }

  at::Generator generator_;
  Block block_{nullptr};
  at::Tensor input_;
  std::vector<at::Tensor> initial_;
};

TEST_F(CheckpointTest, GradientsBuffersAndNextDrawsAreThoseOfThePlainForward) {
  const Outcome expected = step([&](const at::Tensor& x) { return plain(x); });
  reset_state();
  const Outcome seen = step([&](const at::Tensor& x) { return checkpointed(x, own_generator()); });
  expect_identical(expected, seen);
  EXPECT_EQ(expected.calls, 1);
  EXPECT_EQ(seen.calls, 2);  // the forward, and its recomputation
}

TEST_F(CheckpointTest, WithoutTheRanksGeneratorItsDropoutMaskDiffersInTheRecomputation) {
  const Outcome expected = step([&](const at::Tensor& x) { return plain(x); });
  reset_state();
  const Outcome seen = step([&](const at::Tensor& x) { return checkpointed(x, {}); });
  EXPECT_FALSE(at::equal(expected.tensors[1], seen.tensors[1]));  // first's weight
}

TEST_F(CheckpointTest, TheGraphHoldsOnlyTheInputAndTheParameters) {
  at::Tensor out = checkpointed(input_, own_generator());
  ASSERT_TRUE(out.grad_fn());
  const auto& edges = out.grad_fn()->next_edges();
  size_t reached = 0;
  for (const auto& edge : edges) {
    if (!edge.function) continue;
    ++reached;
    // Every edge ends at a leaf's accumulator: no operation of the body was
    // recorded, so none of its activations is kept.
    EXPECT_NE(edge.function->name().find("AccumulateGrad"), std::string::npos)
        << edge.function->name();
  }
  EXPECT_EQ(reached, 1 + block_->parameters().size());
}

TEST_F(CheckpointTest, WithoutGradModeItIsThePlainCall) {
  torch::NoGradGuard no_grad;
  at::Tensor out = checkpointed(input_, own_generator());
  EXPECT_FALSE(out.grad_fn());
  EXPECT_EQ(block_->calls, 1);
}

TEST_F(CheckpointTest, TheRecomputationRunsUnderTheForwardsAutocast) {
  auto under_autocast = [&](const std::function<at::Tensor(const at::Tensor&)>& run) {
    return [run](const at::Tensor& x) {
      compat::AutocastScope autocast(c10::DeviceType::CPU, true, at::kBFloat16);
      at::Tensor out = run(x);
      EXPECT_EQ(out.scalar_type(), at::kBFloat16);
      return out.to(at::kFloat);
    };
  };
  const Outcome expected = step(under_autocast([&](const at::Tensor& x) { return plain(x); }));
  reset_state();
  const Outcome seen =
      step(under_autocast([&](const at::Tensor& x) { return checkpointed(x, own_generator()); }));
  expect_identical(expected, seen);
}

TEST_F(CheckpointTest, ACheckpointInsideACheckpointIsExact) {
  const Outcome expected = step([&](const at::Tensor& x) { return plain(x); });
  reset_state();
  BlockImpl* block = block_.get();
  const CheckpointOptions options = own_generator();
  const Outcome seen = step([&](const at::Tensor& x) {
    return checkpoint(
        *block_, x,
        [block, options](const at::Tensor& in) {
          return checkpoint(
              *block, in, [block](const at::Tensor& inner) { return block->forward(inner); },
              options);
        },
        options);
  });
  expect_identical(expected, seen);
}

// On a GPU: dropout drawn from the device's default generator and float16
// autocast, both as the forward ran them (skipped where no GPU is; ci/gpu.sh
// runs it on one).
TEST(CheckpointOnCuda, TheDevicesGeneratorAndAutocastAreThoseOfTheForward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  torch::manual_seed(5);
  torch::nn::Linear linear(6, 8);
  linear->to(at::kCUDA);
  at::Tensor input = torch::randn({7, 6}).to(at::kCUDA).requires_grad_();
  auto body = [&](const at::Tensor& x) { return torch::dropout(linear->forward(x), 0.5, true); };
  // Gradients and the generator's next draws after one forward and backward.
  auto run = [&](const std::optional<CheckpointOptions>& checkpointed) {
    torch::cuda::manual_seed(99);
    linear->zero_grad();
    input.mutable_grad() = at::Tensor();
    at::Tensor out;
    {
      compat::AutocastScope autocast(c10::DeviceType::CUDA, true, at::kHalf);
      out = checkpointed ? checkpoint(*linear, input, body, *checkpointed) : body(input);
      EXPECT_EQ(out.scalar_type(), at::kHalf);
    }
    (out.to(at::kFloat) * at::arange(8, input.options().requires_grad(false))).sum().backward();
    return std::vector<at::Tensor>{input.grad().cpu(), linear->weight.grad().cpu(),
                                   linear->bias.grad().cpu(),
                                   torch::rand({3}, input.options().requires_grad(false)).cpu()};
  };
  const auto plain = run(std::nullopt);
  const auto seen = run(CheckpointOptions{});
  ASSERT_EQ(plain.size(), seen.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(at::equal(plain[i], seen[i])) << "tensor " << i;
  }
  CheckpointOptions unpreserved;
  unpreserved.preserve_rng_state = false;
  EXPECT_FALSE(at::equal(plain[1], run(unpreserved)[1]))
      << "without the device's state the recomputed mask differs";
}

TEST(CheckpointedModulesTest, PicksByTypeAndByPathAndRoutesCallUnit) {
  torch::nn::Sequential model(Block(at::make_generator<at::CPUGeneratorImpl>(1)),
                              torch::nn::Linear(5, 5), torch::nn::Linear(5, 2));
  CheckpointSelection selection;
  selection.module_types = {"Block"};
  selection.module_names = {"2"};
  CheckpointedModules marked(*model, selection);
  EXPECT_EQ(marked.names(), (std::vector<std::string>{"0", "2"}));
  EXPECT_NE(checkpoint_options(*model[0]), nullptr);
  EXPECT_EQ(checkpoint_options(*model[1]), nullptr);
  EXPECT_NE(checkpoint_options(*model[2]), nullptr);
  EXPECT_EQ(checkpoint_options(*model[0]->as<BlockImpl>()->first), nullptr);

  auto linear = model[2]->as<torch::nn::Linear>();
  at::Tensor out = call_unit(*model[2], torch::ones({1, 5}).requires_grad_(),
                             [linear](const at::Tensor& in) { return linear->forward(in); });
  EXPECT_NE(out.grad_fn()->name().find("CheckpointFunction"), std::string::npos)
      << out.grad_fn()->name();
}

TEST(CheckpointedModulesTest, MarksEndWithTheirOwner) {
  torch::nn::Sequential model(torch::nn::Linear(2, 2));
  {
    CheckpointSelection selection;
    selection.module_types = {"Linear"};
    CheckpointedModules marked(*model, selection);
    EXPECT_NE(checkpoint_options(*model[0]), nullptr);
  }
  EXPECT_EQ(checkpoint_options(*model[0]), nullptr);
}

TEST(CheckpointedModulesTest, AnUnknownPathOrAnEmptySelectionIsRefused) {
  torch::nn::Sequential model(torch::nn::Linear(2, 2));
  CheckpointSelection unknown;
  unknown.module_names = {"layers.0"};
  try {
    CheckpointedModules marked(*model, unknown);
    FAIL() << "an unknown path was accepted";
  } catch (const dist::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("\"layers.0\""), std::string::npos) << e.what();
  }
  CheckpointSelection nothing;
  nothing.module_types = {"Conv2d"};
  EXPECT_THROW(CheckpointedModules(*model, nothing), dist::InvalidArgument);
}

// A handler that runs the body: stands for a sharding wrapper's unit.
class PassThrough : public UnitCallHandler {
 public:
  at::Tensor call(const torch::nn::Module&, const std::function<at::Tensor()>& body) override {
    return body();
  }
};

TEST(CheckpointedModulesTest, AUnitInsideACheckpointedModuleIsRefused) {
  torch::nn::Sequential outer(torch::nn::Linear(2, 2));
  auto inner = outer[0]->as<torch::nn::Linear>();
  PassThrough unit;
  attach_unit_handler(inner, &unit);
  CheckpointSelection selection;
  selection.module_types = {"Sequential"};
  // The root is never picked: hold the Sequential one level down.
  torch::nn::Module model;
  model.register_module("outer", outer);
  CheckpointedModules marked(model, selection);
  auto body = [inner](const at::Tensor& in) {
    return call_unit(*inner, in, [inner](const at::Tensor& x) { return inner->forward(x); });
  };
  EXPECT_THROW(call_unit(*outer, torch::ones({1, 2}).requires_grad_(), body),
               dist::InvalidArgument);
  // The unit called at the top, or as the checkpointed module itself, runs.
  EXPECT_NO_THROW(body(torch::ones({1, 2})));
  detach_unit_handler(inner);
}

}  // namespace
}  // namespace engine::model
