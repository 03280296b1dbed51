// The engine's side of the cross-implementation test (cross_check.sh). Under
// a launcher, on gloo: trains torch_reference.py's case (its initial weights
// and global batches, read from INPUTS, each rank on its share of a batch)
// under DDPStrategy, FSDPStrategy (FULL_SHARD) and ZeroStrategy (stages 1,
// 2 and 3), each with every optimizer of the case and clipping by norm; saves
// a full checkpoint (OUT/checkpoints), and rank 0 writes what it holds (parameters, optimizer
// state by parameter name) and each step's loss and gradient norm to OUT,
// named as torch_reference.py names its runs.
//   cross_check INPUTS OUT
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tensor.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/checkpoint/file.h"
#include "engine/checkpoint/state_dict.h"
#include "engine/dist/dist.h"
#include "engine/optim/optimizer_state.h"
#include "engine/strategy/strategy.h"
#include "testing/cross_check/tensor_folder.h"
#include "tools/bench/mlp.h"

namespace {

using cross_check::Tensors;
using Json = nlohmann::json;
namespace dist = engine::dist;

struct Run {
  std::string name;
  Json strategy;
};

std::vector<Run> runs() {
  const auto zero = [](int stage) {
    return Json{{"type", "ZeroStrategy"}, {"stage", stage}, {"state_dict_type", "full"}};
  };
  return {{"ddp", {{"type", "DDPStrategy"}}},
          {"full_shard",
           {{"type", "FSDPStrategy"},
            {"model_wrapper", {{"sharding_strategy", "FULL_SHARD"}}},
            {"state_dict_type", "full"}}},
          {"zero1", zero(1)},
          {"zero2", zero(2)},
          {"zero3", zero(3)}};
}

struct Case {
  Json settings;  // case.json
  Tensors inputs;
  bench::MlpShape shape() const {
    return {settings.at("width").get<int64_t>(), settings.at("hidden_layers").get<int>()};
  }
};

engine::checkpoint::StateDict initial_weights(const Tensors& inputs) {
  engine::checkpoint::StateDict weights;
  const std::string prefix = "init/";
  for (const auto& [name, value] : inputs) {
    if (name.rfind(prefix, 0) == 0) weights[name.substr(prefix.size())] = value;
  }
  return weights;
}

at::Tensor as_tensor(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor();
  return at::scalar_tensor(value.toScalar(), at::kFloat);
}

// The parameters and optimizer state of the full checkpoint at `path`, by
// parameter name (`names`, in the optimizer's order), under `prefix`.
Tensors checkpoint_contents(const std::string& path, const std::vector<std::string>& names,
                            const std::string& prefix) {
  const auto content = engine::checkpoint::load_file(path).toGenericDict();
  Tensors out;
  for (const auto& [name, value] :
       engine::checkpoint::from_dict(content.at("state_dict").toGenericDict())) {
    out[prefix + "param/" + name] = value;
  }
  const auto optimizer = engine::optim::from_state_dict(content.at("optimizer"), "the checkpoint");
  for (size_t i = 0; i < optimizer.params.size(); ++i) {
    for (const auto& entry : optimizer.params[i]) {
      const at::Tensor value = as_tensor(entry.value());
      if (value.defined()) {
        out[prefix + "state/" + names.at(i) + "/" + entry.key().toStringRef()] = value;
      }
    }
  }
  return out;
}

// One run with one optimizer; what rank 0 writes (empty elsewhere).
Tensors train(const Run& run, const std::string& optimizer, const Case& c, const std::string& out) {
  Json strategy_config = run.strategy;
  strategy_config["launcher"] = "pytorch";
  strategy_config["backend"] = "gloo";
  strategy_config["seed"] = 0;
  auto strategy = engine::strategy::strategies().build(strategy_config);
  strategy->setup_env();
  auto model = std::make_shared<bench::Mlp>(c.shape());
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) names.push_back(item.key());
  engine::checkpoint::load_state_dict(*model, initial_weights(c.inputs), /*strict=*/true,
                                      "the case's initial weights");
  const Json optim_wrapper = {
      {"type", "OptimWrapper"},
      {"optimizer", c.settings.at("optimizers").at(optimizer)},
      {"clip_grad", {{"type", "norm"}, {"max_norm", c.settings.at("max_norm")}}}};
  const auto& prepared = strategy->prepare(model, optim_wrapper);

  const int64_t steps = c.settings.at("steps");
  const int64_t share = c.settings.at("batch").get<int64_t>() / dist::get_world_size();
  const int64_t first = dist::get_rank() * share;
  std::vector<float> losses, norms;
  for (int64_t step = 0; step < steps; ++step) {
    const std::string batch = "batch/" + std::to_string(step) + "/";
    const engine::model::TensorDict data = {
        {"inputs", c.inputs.at(batch + "inputs").narrow(0, first, share)},
        {"labels", c.inputs.at(batch + "labels").narrow(0, first, share)}};
    const auto logs = prepared.model->train_step(data, *prepared.optim_wrapper);
    losses.push_back(logs.at("loss").item<float>());
    norms.push_back(static_cast<float>(prepared.optim_wrapper->last_grad_norm().value()));
  }
  const std::string path = out + "/checkpoints/" + run.name + "_" + optimizer + ".pth";
  strategy->save_checkpoint(path, {steps, 0});
  if (dist::get_rank() != 0) return {};
  const std::string prefix = run.name + "_" + optimizer + "/";
  Tensors result = checkpoint_contents(path, names, prefix);
  result[prefix + "loss"] = at::tensor(losses);
  result[prefix + "grad_norm"] = at::tensor(norms);
  return result;
}

Json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return Json::parse(in);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: cross_check INPUTS OUT (under a launcher)\n";
    return 2;
  }
  at::set_num_threads(1);
  try {
    const std::string inputs = argv[1], out = argv[2];
    const Case c{read_json(inputs + "/case.json"), cross_check::read_tensor_folder(inputs)};
    Tensors results;
    for (const auto& run : runs()) {
      for (const auto& optimizer : c.settings.at("optimizers").items()) {
        results.merge(train(run, optimizer.key(), c, out));
      }
    }
    if (dist::get_rank() == 0) cross_check::write_tensor_folder(out, results);
    dist::barrier();
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "cross_check: " << error.what() << "\n";
    return 1;
  }
}
