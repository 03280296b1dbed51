#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <iostream>

#include "engine/checkpoint/file.h"
#include "engine/dist/dist.h"
#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/strategy/checkpoint_entries.h"
#include "engine/strategy/strategy.h"

// What DDPStrategy's checkpoints hold of the wrapper: the bucket order the
// reducer rebuilt (so that a resumed run's buckets are the saved run's from
// its first step) and the communication hook's per-rank state.
namespace engine::strategy {
namespace {

using Dict = c10::impl::GenericDict;

model::MMDistributedDataParallel* ddp_of(model::BaseModel* model) {
  return dynamic_cast<model::MMDistributedDataParallel*>(model);
}

at::Tensor order_tensor(const std::vector<size_t>& order) {
  at::Tensor out = at::empty({static_cast<int64_t>(order.size())}, at::kLong);
  auto values = out.accessor<int64_t, 1>();
  for (size_t i = 0; i < order.size(); ++i) values[i] = static_cast<int64_t>(order[i]);
  return out;
}

std::vector<size_t> order_of(const at::Tensor& saved) {
  const at::Tensor values = saved.to(at::kLong).contiguous();
  std::vector<size_t> order;
  for (int64_t i = 0; i < values.numel(); ++i) {
    const int64_t param = values.data_ptr<int64_t>()[i];
    order.push_back(param < 0 ? SIZE_MAX : static_cast<size_t>(param));
  }
  return order;
}

void tell_on_rank0(const std::string& message) {
  if (dist::get_rank() == 0) std::cerr << message << "\n";
}

}  // namespace

Dict DDPStrategy::wrapper_state() {
  Dict out = empty_extra();
  auto* ddp = ddp_of(prepared().model.get());
  if (ddp == nullptr) return out;
  const std::vector<size_t> order = ddp->reducer().rebuilt_order();
  if (!order.empty()) out.insert("bucket_order", order_tensor(order));
  const model::CommHookPtr& hook = ddp->reducer().comm_hook();
  if (!hook) return out;
  Dict rows = empty_extra();
  for (const auto& item : hook->state()) rows.insert(item.key(), rows_of_all_ranks(item.value()));
  out.insert("comm_hook", hook->describe());
  out.insert("comm_hook_state", rows);
  return out;
}

void DDPStrategy::restore_wrapper_state(const Dict& saved, const std::string& path) {
  auto* ddp = ddp_of(prepared().model.get());
  if (ddp == nullptr) return;
  try {
    if (saved.contains("bucket_order")) {
      ddp->reducer().restore_rebuilt_order(order_of(saved.at("bucket_order").toTensor()));
    }
    if (!saved.contains("comm_hook_state")) return;
    const model::CommHookPtr& hook = ddp->reducer().comm_hook();
    const std::string saved_hook = checkpoint_entry(saved, "comm_hook", path).toStringRef();
    if (!hook || hook->describe() != saved_hook) {
      tell_on_rank0("checkpoint " + path + " holds the state of the communication hook " +
                    saved_hook + ", this run has " + (hook ? hook->describe() : "none") +
                    ": the hook starts afresh");
      return;
    }
    const Dict rows = saved.at("comm_hook_state").toGenericDict();
    model::HookState mine;
    for (const auto& item : rows) {
      const at::Tensor all = item.value().toTensor();
      if (all.size(0) != dist::get_world_size()) {
        tell_on_rank0("checkpoint " + path + " holds the communication hook state of " +
                      std::to_string(all.size(0)) + " ranks, this run has " +
                      std::to_string(dist::get_world_size()) + ": the hook starts afresh");
        return;
      }
      mine.insert(item.key().toStringRef(), my_row(all, path).clone());
    }
    hook->load_state(mine);
  } catch (const dist::InvalidArgument& error) {
    throw checkpoint::CheckpointError(
        dist::on_rank(dist::get_rank(), "checkpoint " + path +
                                            ": its \"wrapper\" entry does not fit this "
                                            "model's DDP wrapper: " +
                                            error.what()));
  }
}

}  // namespace engine::strategy
