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
    scheduler = [&](torch::optim::Optimizer& optimizer) {
      return optim::param_schedulers().build(*param_scheduler, optimizer);
    };
  }
  return prepare_with(std::move(model), optim_wrapper, scheduler);
}

const Prepared& BaseStrategy::prepare(std::shared_ptr<model::BaseModel> model,
                                      const registry::Json& optim_wrapper,
                                      const optim::MultiStepLR& built_scheduler) {
  return prepare_with(std::move(model), optim_wrapper, [&](torch::optim::Optimizer& optimizer) {
    return built_scheduler.rebuilt_on(optimizer);
  });
}

const Prepared& BaseStrategy::prepare_with(std::shared_ptr<model::BaseModel> model,
                                           const registry::Json& optim_wrapper,
                                           const SchedulerFor& param_scheduler) {
  if (prepared_) return *prepared_;
  setup_env();
  Prepared out;
  out.model = wrap_model(std::move(model));
  if (activation_checkpointing_) {
    model::CheckpointSelection selection = *activation_checkpointing_;
    selection.options.generators.push_back(generator_);
    auto* wrapper = dynamic_cast<model::ModelWrapper*>(out.model.get());
    checkpointed_ = std::make_unique<model::CheckpointedModules>(
        wrapper ? wrapper->module() : *out.model, std::move(selection));
  }
  out.optim_wrapper =
      optim::build_optim_wrapper(optim_wrapper, model::unique_parameters(*out.model));
  if (param_scheduler) out.param_scheduler = param_scheduler(out.optim_wrapper->optimizer());
  prepared_ = std::move(out);
  return *prepared_;
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

const Prepared& BaseStrategy::prepared() const {
  if (!prepared_) {
    throw dist::InvalidArgument(
        dist::on_rank(dist::get_rank(), "the strategy has no model yet: call prepare() first"));
  }
  return *prepared_;
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
