#include "engine/strategy/checkpoint_entries.h"

#include <ATen/ops/stack.h>

#include "engine/checkpoint/file.h"
#include "engine/dist/dist.h"

namespace engine::strategy {

at::Tensor rows_of_all_ranks(const at::Tensor& mine) {
  return dist::is_distributed() ? at::stack(dist::all_gather_anywhere(mine)) : mine.unsqueeze(0);
}

at::Tensor my_row(const at::Tensor& rows, const std::string& path, const std::string& saved_as) {
  if (rows.size(0) != dist::get_world_size()) {
    throw checkpoint::CheckpointError(
        dist::on_rank(dist::get_rank(), "checkpoint " + path + " " + saved_as + " by " +
                                            std::to_string(rows.size(0)) +
                                            " ranks; resume it with as many ranks"));
  }
  return rows[dist::get_rank()];
}

c10::impl::GenericDict read_single_file(const std::string& path) {
  return checkpoint::load_file(path).toGenericDict();
}

c10::IValue checkpoint_entry(const c10::impl::GenericDict& content, const std::string& key,
                             const std::string& path) {
  if (!content.contains(key)) {
    throw checkpoint::CheckpointError(
        dist::on_rank(dist::get_rank(), "checkpoint " + path + ": has no \"" + key +
                                            "\" entry; was it written by save_checkpoint?"));
  }
  return content.at(key);
}

optim::OptimizerState optimizer_entry(const c10::impl::GenericDict& content, const std::string& key,
                                      const std::string& path) {
  return optimizer_value(checkpoint_entry(content, key, path),
                         "checkpoint " + path + "'s \"" + key + "\" entry");
}

optim::OptimizerState optimizer_value(const c10::IValue& entry, const std::string& what) {
  if (entry.isTensor()) {
    throw checkpoint::CheckpointError(dist::on_rank(
        dist::get_rank(),
        what + " is LibTorch's optimizer archive, which an engine before the state_dict layout "
               "wrote; this engine does not load it (loading one compiles and runs the TorchScript "
               "inside it). Resume from the weights (load_from) instead"));
  }
  try {
    return optim::from_state_dict(entry, what);
  } catch (const dist::InvalidArgument& error) {
    throw checkpoint::CheckpointError(dist::on_rank(dist::get_rank(), error.what()));
  }
}

}  // namespace engine::strategy
