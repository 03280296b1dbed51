#include "engine/strategy/strategy.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include "engine/dist/dist.h"
#include "engine/model/batch_norm.h"
#include "engine/model/named_parameter.h"
#include "engine/model/wrappers/model_wrapper.h"
#include "engine/model/wrappers/wrapper_registry.h"
#include "engine/optim/builders.h"

namespace engine::strategy {
namespace {

// mmengine's rule: without "optimizer" and "constructor" (and here "type")
// the config is one of several wrappers.
bool is_wrapper_dict(const registry::Json& config) {
  if (!config.is_object() || config.empty()) return false;
  for (const char* key : {"type", "optimizer", "constructor"}) {
    if (config.contains(key)) return false;
  }
  for (const auto& item : config.items()) {
    if (!item.value().is_object()) return false;
  }
  return true;
}

// mmengine's form for several wrappers: an object without "type", keyed by
// the wrappers' names.
bool keyed_by_wrapper(const registry::Json& param_scheduler) {
  return param_scheduler.is_object() && !param_scheduler.contains("type");
}

// A param_scheduler keyed by wrapper names names every wrapper and no more.
void check_scheduler_keys(const registry::Json& optim_wrapper,
                          const registry::Json& param_scheduler) {
  if (!keyed_by_wrapper(param_scheduler)) return;
  auto fail = [](const std::string& what) {
    throw registry::ConfigError(dist::on_rank(dist::get_rank(), "param_scheduler: " + what));
  };
  if (!is_wrapper_dict(optim_wrapper)) {
    fail(
        "lacks the required key \"type\" (keys by optimizer wrapper name need several "
        "wrappers)");
  }
  for (const auto& item : param_scheduler.items()) {
    if (!optim_wrapper.contains(item.key())) {
      fail("\"" + item.key() + "\" is no optimizer wrapper's name");
    }
  }
  for (const auto& item : optim_wrapper.items()) {
    if (!param_scheduler.contains(item.key())) {
      fail("has no scheduler for the optimizer wrapper \"" + item.key() +
           "\"; keyed by wrapper name, it needs one for each");
    }
  }
}

std::shared_ptr<optim::OptimWrapperDict> build_wrapper_dict(const registry::Json& config,
                                                            torch::nn::Module& module) {
  const auto children = module.named_children();
  std::vector<optim::OptimWrapperDict::Item> wrappers;
  for (const auto& item : config.items()) {
    const auto* child = children.find(item.key());
    if (!child) {
      std::string names;
      for (const auto& known : children) names += (names.empty() ? "" : ", ") + known.key();
      throw registry::ConfigError(dist::on_rank(
          dist::get_rank(), "optim_wrapper: \"" + item.key() +
                                "\" names no child module of the model (its children: " +
                                (names.empty() ? "none" : names) +
                                "); with several optimizer wrappers each key names the child "
                                "whose parameters it steps"));
    }
    wrappers.emplace_back(
        item.key(), optim::build_optim_wrapper(item.value(), model::unique_parameters(**child)));
  }
  return std::make_shared<optim::OptimWrapperDict>(std::move(wrappers));
}

}  // namespace

Extra empty_extra() { return Extra(c10::StringType::get(), c10::AnyType::get()); }

BaseStrategy::BaseStrategy(EnvOptions options)
    : options_(std::move(options)), generator_(at::make_generator<at::CPUGeneratorImpl>()) {}

void BaseStrategy::setup_env() {
  if (env_ready_) return;
  const std::string launcher = options_.launcher == "auto"
                                   ? dist::infer_launcher(dist::process_environment())
                                   : options_.launcher;
  if (launcher != "none" && !dist::is_distributed()) {
    dist::InitOptions init;
    init.timeout = options_.timeout;
    dist::init_dist(launcher, options_.backend, init);
  }
  shared_seed_ = options_.seed ? *options_.seed : dist::sync_random_seed();
  seed_ = shared_seed_ + (options_.diff_rank_seed ? dist::get_rank() : 0);
  generator_.set_current_seed(static_cast<uint64_t>(seed_));
  if (options_.seed_process_generator) at::manual_seed(static_cast<uint64_t>(seed_));
  if (options_.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  env_ready_ = true;
}

const Prepared& BaseStrategy::prepare(std::shared_ptr<model::BaseModel> model,
                                      const registry::Json& optim_wrapper,
                                      const std::optional<registry::Json>& param_scheduler) {
  SchedulerFor scheduler;
  if (param_scheduler) {
    check_scheduler_keys(optim_wrapper, *param_scheduler);
    scheduler = [&](const std::string& wrapper, torch::optim::Optimizer& optimizer) {
      return optim::param_schedulers().build(
          keyed_by_wrapper(*param_scheduler) ? param_scheduler->at(wrapper) : *param_scheduler,
          optimizer);
    };
  }
  return prepare_with(std::move(model), optim_wrapper, scheduler);
}

const Prepared& BaseStrategy::prepare(std::shared_ptr<model::BaseModel> model,
                                      const registry::Json& optim_wrapper,
                                      const optim::MultiStepLR& built_scheduler) {
  return prepare_with(std::move(model), optim_wrapper,
                      [&](const std::string&, torch::optim::Optimizer& optimizer) {
                        return built_scheduler.rebuilt_on(optimizer);
                      });
}

const Prepared& BaseStrategy::prepare_with(std::shared_ptr<model::BaseModel> model,
                                           const registry::Json& optim_wrapper,
                                           const SchedulerFor& param_scheduler) {
  if (prepared_) return *prepared_;
  setup_env();
  const bool several_wrappers = is_wrapper_dict(optim_wrapper);
  if (several_wrappers) check_several_wrappers_allowed();
  Prepared out;
  out.model = wrap_model(std::move(model));
  auto* wrapper = dynamic_cast<model::ModelWrapper*>(out.model.get());
  model::BaseModel& unwrapped = wrapper ? wrapper->module() : *out.model;
  if (activation_checkpointing_) {
    model::CheckpointSelection selection = *activation_checkpointing_;
    selection.options.generators.push_back(generator_);
    checkpointed_ = std::make_unique<model::CheckpointedModules>(unwrapped, std::move(selection));
  }
  if (several_wrappers) {
    out.optim_wrappers = build_wrapper_dict(optim_wrapper, unwrapped);
    for (const auto& [name, wrapper] : out.optim_wrappers->items()) {
      if (param_scheduler) out.param_schedulers[name] = param_scheduler(name, wrapper->optimizer());
    }
  } else {
    out.optim_wrapper =
        optim::build_optim_wrapper(optim_wrapper, model::unique_parameters(*out.model));
    if (param_scheduler) out.param_scheduler = param_scheduler("", out.optim_wrapper->optimizer());
  }
  prepared_ = std::move(out);
  return *prepared_;
}

void BaseStrategy::check_several_wrappers_allowed() const {
  if (!takes_several_optim_wrappers()) {
    throw registry::ConfigError(
        dist::on_rank(dist::get_rank(),
                      "optim_wrapper: this strategy shards one optimizer's state, so it takes "
                      "one optimizer wrapper; for several (an OptimWrapperDict) use "
                      "DDPStrategy or SingleDeviceStrategy"));
  }
}

void BaseStrategy::set_activation_checkpointing(model::CheckpointSelection selection) {
  if (prepared_) {
    throw dist::InvalidArgument(dist::on_rank(
        dist::get_rank(), "activation checkpointing is chosen before prepare(), not after"));
  }
  activation_checkpointing_ = std::move(selection);
}

std::vector<std::string> BaseStrategy::checkpointed_modules() const {
  return checkpointed_ ? checkpointed_->names() : std::vector<std::string>{};
}

void Prepared::initialize_count_status(int64_t init_counts, int64_t max_counts) const {
  if (optim_wrappers) {
    optim_wrappers->initialize_count_status(init_counts, max_counts);
  } else {
    optim_wrapper->initialize_count_status(init_counts, max_counts);
  }
}

model::TensorDict Prepared::train_step(const model::TensorDict& data) const {
  return optim_wrappers ? model->train_step(data, *optim_wrappers)
                        : model->train_step(data, *optim_wrapper);
}

void Prepared::step_schedulers() const {
  if (param_scheduler) param_scheduler->step();
  for (const auto& item : param_schedulers) item.second->step();
}

std::vector<std::pair<std::string, double>> Prepared::learning_rates() const {
  return optim_wrappers ? optim_wrappers->learning_rates() : optim_wrapper->learning_rates();
}

const Prepared& BaseStrategy::prepared() const {
  if (!prepared_) {
    throw dist::InvalidArgument(
        dist::on_rank(dist::get_rank(), "the strategy has no model yet: call prepare() first"));
  }
  return *prepared_;
}

std::vector<std::pair<std::string, optim::OptimWrapper*>> BaseStrategy::optim_wrappers_by_name()
    const {
  const Prepared& parts = prepared();
  if (!parts.optim_wrappers) return {{"", parts.optim_wrapper.get()}};
  std::vector<std::pair<std::string, optim::OptimWrapper*>> out;
  for (const auto& [name, wrapper] : parts.optim_wrappers->items()) {
    out.emplace_back(name, wrapper.get());
  }
  return out;
}

model::BaseModel& BaseStrategy::module() {
  auto& trained = *prepared().model;
  if (auto* wrapper = dynamic_cast<model::ModelWrapper*>(&trained)) return wrapper->module();
  return trained;
}

std::shared_ptr<model::BaseModel> SingleDeviceStrategy::wrap_model(
    std::shared_ptr<model::BaseModel> model) {
  return model;
}

void check_sync_bn(const std::optional<std::string>& sync_bn, const std::string& strategy) {
  if (sync_bn && *sync_bn != "torch") {
    throw registry::ConfigError(
        dist::on_rank(dist::get_rank(), strategy +
                                            ": key \"sync_bn\" must be \"torch\" (the engine's "
                                            "SyncBatchNorm), not \"" +
                                            *sync_bn + "\""));
  }
}

DDPStrategy::DDPStrategy(EnvOptions env, DDPStrategyOptions options)
    : BaseStrategy(std::move(env)), options_(std::move(options)) {
  check_sync_bn(options_.sync_bn, "DDPStrategy");
}

std::shared_ptr<model::BaseModel> DDPStrategy::wrap_model(std::shared_ptr<model::BaseModel> model) {
  // Where the collectives take their tensors: the rank's GPU on nccl (as
  // mmengine's model.to(get_device()) with device_ids=[LOCAL_RANK]); the CPU
  // on gloo and mpi, which move host memory only.
  model->to(dist::get_comm_device());
  if (options_.sync_bn) model::convert_sync_batchnorm(*model);
  registry::Json config = options_.model_wrapper;
  if (!config.contains("broadcast_buffers")) config["broadcast_buffers"] = false;
  return model::model_wrappers().build(config, std::move(model), "MMDistributedDataParallel");
}

}  // namespace engine::strategy
