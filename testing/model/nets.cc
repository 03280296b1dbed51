#include "testing/model/nets.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/ordered_dict.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "engine/model/batch_norm.h"
#include "engine/model/named_parameter.h"
#include "engine/model/unit_call.h"

namespace nets {

rc::Gen<NetSpec> net_spec() {
  return rc::gen::exec([] {
    NetSpec spec;
    const bool conv = *rc::gen::arbitrary<bool>();
    spec.inputs = *rc::gen::inRange<int64_t>(1, 5);
    spec.image = conv ? *rc::gen::inRange<int64_t>(3, 6) : 0;
    spec.trunk = *rc::gen::container<std::vector<int64_t>>(*rc::gen::inRange<size_t>(1, 4),
                                                           rc::gen::inRange<int64_t>(1, 24));
    spec.heads = *rc::gen::inRange<int64_t>(1, 4);
    spec.outputs = *rc::gen::inRange<int64_t>(1, 4);
    spec.batch_norm = *rc::gen::arbitrary<bool>();
    spec.odd_parameters = *rc::gen::arbitrary<bool>();
    spec.nested = *rc::gen::arbitrary<bool>();
    spec.tied = *rc::gen::arbitrary<bool>();
    return spec;
  });
}

std::string describe(const NetSpec& spec) {
  std::string text =
      "inputs=" + std::to_string(spec.inputs) + " image=" + std::to_string(spec.image) + " trunk=[";
  for (int64_t width : spec.trunk) text += std::to_string(width) + ",";
  return text + "] heads=" + std::to_string(spec.heads) +
         " outputs=" + std::to_string(spec.outputs) +
         " batch_norm=" + std::to_string(spec.batch_norm) +
         " odd_parameters=" + std::to_string(spec.odd_parameters) +
         " nested=" + std::to_string(spec.nested) + " tied=" + std::to_string(spec.tied);
}

namespace {

// A Linear whose weight is another module's tensor (a module type of its
// own: wrap policies by type name see "TiedLinear").
class TiedLinear : public torch::nn::LinearImpl {
 public:
  TiedLinear(int64_t in, int64_t out) : torch::nn::LinearImpl(in, out) {}
  void tie_weight(const at::Tensor& shared) {
    weight = shared;
    parameters_["weight"] = shared;
  }
};

}  // namespace

TestNet::TestNet(const NetSpec& spec) : spec_(spec) {
  int64_t width = spec.inputs;
  if (spec.image > 0) {
    layers_.push_back(register_module(
        "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(spec.inputs, 3, 2)).ptr()));
    width = 3 * (spec.image - 1) * (spec.image - 1);
  }
  torch::nn::Module& body =
      spec.nested ? *register_module("body", std::make_shared<torch::nn::Module>("Body")) : *this;
  for (size_t i = 0; i < spec.trunk.size(); ++i) {
    layers_.push_back(body.register_module("trunk" + std::to_string(i),
                                           torch::nn::Linear(width, spec.trunk[i]).ptr()));
    width = spec.trunk[i];
    if (i == 0 && spec.batch_norm) {
      layers_.push_back(body.register_module(
          "norm", engine::model::BatchNorm(engine::model::BatchNormOptions(width)).ptr()));
    }
  }
  if (spec.nested) {
    body.register_parameter("gain", torch::linspace(0.5, 1.5, width));
    body.register_module("meter", std::make_shared<torch::nn::Module>("Meter"))
        ->register_buffer("forwards", torch::zeros({}));
  }
  for (int64_t h = 0; h < spec.heads; ++h) {
    const std::string name = "head" + std::to_string(h);
    if (!spec.tied || h == 0) {
      layers_.push_back(register_module(name, torch::nn::Linear(width, spec.outputs).ptr()));
      continue;
    }
    auto head = std::make_shared<TiedLinear>(width, spec.outputs);
    head->tie_weight(layers_[layers_.size() - h]->as<torch::nn::Linear>()->weight);
    layers_.push_back(register_module(name, head));
  }
  if (spec.odd_parameters) {
    register_parameter("scale", torch::full({}, 1.5));
    register_parameter("nothing", torch::empty({0}));
  }
  to(torch::kDouble);
}

// Each layer runs through call_unit, so that a sharding wrapper may make it
// a unit of its own and a strategy may checkpoint it (elsewhere call_unit is
// the plain call).
engine::model::TensorDict TestNet::forward(const engine::model::TensorDict& data,
                                           engine::model::ForwardMode mode) {
  at::Tensor x = data.at("inputs");
  const at::Tensor& mask = data.at("head_mask");
  size_t next = 0;
  auto run = [&](size_t layer, auto* typed) {
    return engine::model::call_unit(*layers_[layer], x,
                                    [typed](const at::Tensor& in) { return typed->forward(in); });
  };
  if (spec_.image > 0) {
    x = torch::tanh(run(next, layers_[next]->as<torch::nn::Conv2d>())).flatten(1);
    ++next;
  }
  auto trunk = [&] {
    for (size_t i = 0; i < spec_.trunk.size(); ++i, ++next) {
      x = torch::tanh(run(next, layers_[next]->as<torch::nn::Linear>()));
      if (i == 0 && spec_.batch_norm) {
        ++next;
        x = run(next, layers_[next]->as<engine::model::BatchNorm>());
      }
    }
    return x;
  };
  if (spec_.nested) {
    // The body's own parameter as the wrapper holds it now, read inside the
    // body's call (a unit of its own under some wrap policies).
    torch::nn::Module& body = *named_children()["body"];
    x = engine::model::call_unit(body, [&] {
      trunk();
      return x * body.named_parameters(/*recurse=*/false)["gain"].to(x.scalar_type());
    });
    if (is_training()) {
      torch::NoGradGuard no_grad;
      body.named_children()["meter"]->named_buffers()["forwards"].add_(1);
    }
  } else {
    trunk();
  }
  at::Tensor out = torch::zeros({x.size(0), spec_.outputs}, x.options());
  const at::Tensor order = data.at("head_order");
  for (int64_t i = 0; i < spec_.heads; ++i) {
    const int64_t h = order[i].item<int64_t>();
    at::Tensor column = mask.select(1, h).unsqueeze(1);
    if (!column.any().item<bool>()) continue;
    out = out + column * run(next + h, layers_[next + h]->as<torch::nn::Linear>());
  }
  if (spec_.odd_parameters) {
    // The module's own parameters, as the wrapper holds them now (a sharding
    // wrapper swaps them while it gathers).
    auto own = named_parameters(/*recurse=*/false);
    out = out * own["scale"].to(out.scalar_type()) + own["nothing"].to(out.scalar_type()).sum();
  }
  if (mode == engine::model::ForwardMode::kLoss) {
    return {{"loss", torch::mse_loss(out, data.at("target"))}};
  }
  return {{"output", out}};
}

std::shared_ptr<TestNet> make_net(const NetSpec& spec) { return std::make_shared<TestNet>(spec); }

void copy_state(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto source = from.named_parameters();
  for (auto& item : to.named_parameters()) item.value().copy_(source[item.key()]);
  auto buffers = from.named_buffers();
  for (auto& item : to.named_buffers()) item.value().copy_(buffers[item.key()]);
}

void scramble_state(torch::nn::Module& module, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& param : engine::model::unique_parameters(module)) param.normal_(0, 1, generator);
  for (auto& item : module.named_buffers()) {
    at::Tensor& buffer = item.value();
    if (!at::isFloatingType(buffer.scalar_type())) {
      buffer.random_(0, 100, generator);
    } else if (item.key().find("running_var") != std::string::npos) {
      buffer.uniform_(0.5, 2.0, generator);
    } else {
      buffer.normal_(0, 1, generator);
    }
  }
}

namespace {

std::map<std::string, at::Tensor> clones(const torch::OrderedDict<std::string, at::Tensor>& items) {
  std::map<std::string, at::Tensor> values;
  for (const auto& item : items) values[item.key()] = item.value().detach().clone();
  return values;
}

}  // namespace

std::map<std::string, at::Tensor> snapshot(torch::nn::Module& module) {
  return clones(module.named_parameters());
}

std::map<std::string, at::Tensor> buffers_of(torch::nn::Module& module) {
  return clones(module.named_buffers());
}

engine::model::TensorDict make_batch(const NetSpec& spec, int64_t batch, uint64_t seed,
                                     const std::vector<bool>& used_heads,
                                     const std::vector<int64_t>& head_order) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto options = torch::TensorOptions().dtype(torch::kDouble);
  std::vector<int64_t> shape{batch, spec.inputs};
  if (spec.image > 0) shape = {batch, spec.inputs, spec.image, spec.image};
  at::Tensor mask = torch::zeros({batch, spec.heads}, options);
  for (int64_t h = 0; h < spec.heads; ++h) {
    // Distinct weights give each head its own gradient, so that one head's
    // gradient reduced in another's place shows.
    if (used_heads[h]) mask.select(1, h).fill_(1.0 + h);
  }
  at::Tensor order = head_order.empty() ? torch::arange(spec.heads, torch::kLong)
                                        : torch::tensor(head_order, torch::kLong);
  return {{"inputs", at::randn(shape, generator, options)},
          {"target", at::randn({batch, spec.outputs}, generator, options)},
          {"head_mask", mask},
          {"head_order", order}};
}

engine::model::TensorDict concatenate(const std::vector<engine::model::TensorDict>& batches) {
  engine::model::TensorDict joined;
  for (const auto& [name, value] : batches.front()) {
    if (name == "head_order") {
      joined[name] = value;
      continue;
    }
    std::vector<at::Tensor> parts;
    for (const auto& batch : batches) parts.push_back(batch.at(name));
    joined[name] = torch::cat(parts);
  }
  return joined;
}

}  // namespace nets
