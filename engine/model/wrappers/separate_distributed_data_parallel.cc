#include "engine/model/wrappers/separate_distributed_data_parallel.h"

#include "engine/dist/errors.h"

namespace engine::model {

MMSeparateDistributedDataParallel::MMSeparateDistributedDataParallel(
    std::shared_ptr<BaseModel> module, DDPOptions options)
    : ModelWrapper(std::move(module)),
      options_(std::move(options)),
      group_(wrapper_group(options_.process_group, "MMSeparateDistributedDataParallel")) {
  if (options_.comm_hook) {
    throw dist::InvalidArgument(dist::on_rank(
        group_->my_global_rank(),
        "MMSeparateDistributedDataParallel takes no comm_hook: each of its submodules has a "
        "reducer of its own, and one hook's per-bucket state cannot serve several; use "
        "MMDistributedDataParallel for a hook"));
  }
  synchronised_parameters(this->module(), group_);
  optim::attach_grad_sync(&this->module(), this);
  for (const auto& child : this->module().named_children()) {
    std::vector<NamedParameter> params = trainable_parameters(*child.value());
    if (params.empty()) continue;
    auto reducer = std::make_unique<Reducer>(std::move(params), group_, reducer_options(options_));
    optim::attach_grad_sync(child.value().get(), reducer.get());
    attached_.push_back(child.value().get());
    reducers_.emplace(child.key(), std::move(reducer));
  }
  // The module's own parameters belong to no child: mmengine leaves them
  // unsynchronised, so the ranks drift apart. They get a reducer of their
  // own, switched with the whole module.
  std::vector<NamedParameter> own = trainable_parameters(this->module(), /*recurse=*/false);
  if (!own.empty()) {
    reducers_.emplace("",
                      std::make_unique<Reducer>(std::move(own), group_, reducer_options(options_)));
  }
}

MMSeparateDistributedDataParallel::~MMSeparateDistributedDataParallel() {
  optim::detach_grad_sync(&module());
  for (const auto* child : attached_) optim::detach_grad_sync(child);
}

TensorDict MMSeparateDistributedDataParallel::train_step(const TensorDict& data,
                                                         optim::OptimWrapper& optim_wrapper) {
  if (options_.broadcast_buffers) broadcast_buffers(module(), group_);
  return module().train_step(data, optim_wrapper);
}

TensorDict MMSeparateDistributedDataParallel::train_step(const TensorDict& data,
                                                         optim::OptimWrapperDict& optim_wrappers) {
  if (options_.broadcast_buffers) broadcast_buffers(module(), group_);
  return module().train_step(data, optim_wrappers);
}

bool MMSeparateDistributedDataParallel::grad_sync_enabled() const {
  for (const auto& [name, reducer] : reducers_) {
    if (!reducer->grad_sync_enabled()) return false;
  }
  return true;
}

void MMSeparateDistributedDataParallel::set_grad_sync_enabled(bool enabled) {
  for (auto& [name, reducer] : reducers_) reducer->set_grad_sync_enabled(enabled);
}

}  // namespace engine::model
