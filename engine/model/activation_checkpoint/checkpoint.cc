#include "engine/model/activation_checkpoint/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "engine/compat/autocast.h"
#include "engine/model/named_parameter.h"

namespace engine::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local int checkpoint_depth = 0;

struct DepthScope {
  DepthScope() { ++checkpoint_depth; }
  ~DepthScope() { --checkpoint_depth; }
};

at::Tensor state_of(at::Generator& generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_state(at::Generator& generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// The generators whose states the recomputation starts from, each once.
std::vector<at::Generator> generators_to_preserve(const at::Tensor& input,
                                                  const CheckpointOptions& options) {
  std::vector<at::Generator> out = {at::detail::getDefaultCPUGenerator()};
  if (!input.device().is_cpu()) out.push_back(at::globalContext().defaultGenerator(input.device()));
  for (const auto& generator : options.generators) {
    const bool listed = std::any_of(out.begin(), out.end(), [&](const at::Generator& known) {
      return known.unsafeGetGeneratorImpl() == generator.unsafeGetGeneratorImpl();
    });
    if (!listed) out.push_back(generator);
  }
  return out;
}

// What the backward needs to run the forward again.
struct Recomputation : torch::CustomClassHolder {
  const torch::nn::Module* module = nullptr;
  CheckpointBody body;
  std::vector<at::Tensor> parameters;
  std::vector<std::pair<at::Generator, at::Tensor>> rng_states;
  compat::AutocastState cpu_autocast;
  compat::AutocastState cuda_autocast;
};

// While it lives, each generator is at the state the forward started from;
// then each is back where it was.
class RngFork {
 public:
  explicit RngFork(const std::vector<std::pair<at::Generator, at::Tensor>>& forward_states) {
    for (const auto& [generator, state] : forward_states) {
      at::Generator handle = generator;
      current_.emplace_back(handle, state_of(handle));
      set_state(handle, state);
    }
  }
  ~RngFork() {
    for (auto& [generator, state] : current_) set_state(generator, state);
  }
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  std::vector<std::pair<at::Generator, at::Tensor>> current_;
};

// While it lives, the module's buffers may change; then they hold again
// what they held before.
class BufferRestore {
 public:
  explicit BufferRestore(const torch::nn::Module& module) {
    torch::NoGradGuard no_grad;
    for (const auto& buffer : module.buffers()) kept_.emplace_back(buffer, buffer.clone());
  }
  ~BufferRestore() {
    torch::NoGradGuard no_grad;
    for (auto& [buffer, value] : kept_) buffer.copy_(value);
  }
  BufferRestore(const BufferRestore&) = delete;
  BufferRestore& operator=(const BufferRestore&) = delete;

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> kept_;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<Recomputation> plan,
                               const at::Tensor& input, at::TensorList /*parameters*/) {
    ctx->save_for_backward({input});
    DepthScope depth;
    at::Tensor output = plan->body(input);
    ctx->saved_data["plan"] = c10::IValue::make_capsule(std::move(plan));
    return {output};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto plan =
        c10::static_intrusive_pointer_cast<Recomputation>(ctx->saved_data["plan"].toCapsule());
    const at::Tensor input = ctx->get_saved_variables()[0];
    const size_t inputs = 2 + plan->parameters.size();
    variable_list grads(inputs);
    if (!grad_outputs[0].defined()) return grads;

    const at::Tensor detached = input.detach().requires_grad_(input.requires_grad());
    // Put back after the gradients: the recomputed graph saved the buffers
    // as the recomputation left them.
    BufferRestore buffers(*plan->module);
    at::Tensor output;
    {
      RngFork fork(plan->rng_states);
      compat::AutocastScope cpu(c10::DeviceType::CPU, plan->cpu_autocast.enabled,
                                plan->cpu_autocast.dtype);
      compat::AutocastScope cuda(c10::DeviceType::CUDA, plan->cuda_autocast.enabled,
                                 plan->cuda_autocast.dtype);
      torch::AutoGradMode grad_mode(true);
      DepthScope depth;
      output = plan->body(detached);
    }
    if (!output.requires_grad()) return grads;

    std::vector<at::Tensor> wrt;
    if (detached.requires_grad()) wrt.push_back(detached);
    wrt.insert(wrt.end(), plan->parameters.begin(), plan->parameters.end());
    const variable_list computed =
        torch::autograd::grad({output}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    size_t next = 0;
    if (detached.requires_grad()) grads[1] = computed[next++];
    for (size_t i = 0; i < plan->parameters.size(); ++i) grads[2 + i] = computed[next++];
    return grads;
  }
};

}  // namespace

bool inside_checkpoint() { return checkpoint_depth > 0; }

at::Tensor checkpoint(const torch::nn::Module& module, const at::Tensor& input,
                      const CheckpointBody& body, const CheckpointOptions& options) {
  std::vector<at::Tensor> parameters;
  for (auto& param : unique_parameters(module)) {
    if (param.requires_grad()) parameters.push_back(std::move(param));
  }
  const bool differentiable = input.requires_grad() || !parameters.empty();
  if (!at::GradMode::is_enabled() || !differentiable) return body(input);

  auto plan = c10::make_intrusive<Recomputation>();
  plan->module = &module;
  plan->body = body;
  plan->parameters = parameters;
  if (options.preserve_rng_state) {
    for (auto& generator : generators_to_preserve(input, options)) {
      plan->rng_states.emplace_back(generator, state_of(generator));
    }
  }
  plan->cpu_autocast = compat::autocast_state(c10::DeviceType::CPU);
  plan->cuda_autocast = compat::autocast_state(c10::DeviceType::CUDA);
  return CheckpointFunction::apply(std::move(plan), input, at::TensorList(parameters))[0];
}

}  // namespace engine::model
