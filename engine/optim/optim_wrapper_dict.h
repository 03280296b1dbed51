#pragma once

#include <ATen/core/Dict.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/optim/optim_wrapper.h"

namespace engine::optim {

// mmengine's OptimWrapperDict: several optimizer wrappers by name, for models
// that step parts of themselves with optimizers of their own (a GAN's
// generator and discriminator). The model's train_step picks each wrapper by
// name and runs its optim_context and update_params itself; the dict has no
// update_params, backward or step of its own, since only the model knows
// which loss belongs to which wrapper (mmengine raises NotImplementedError
// for them).
class OptimWrapperDict {
 public:
  using Item = std::pair<std::string, std::shared_ptr<OptimWrapper>>;

  // In this order. InvalidArgument if empty, if a name is empty or comes
  // twice, or if a wrapper is null.
  explicit OptimWrapperDict(std::vector<Item> wrappers);

  // The wrapper called `name`; InvalidArgument listing the names if none is.
  OptimWrapper& at(const std::string& name) const;
  bool contains(const std::string& name) const;
  const std::vector<Item>& items() const { return wrappers_; }
  size_t size() const { return wrappers_.size(); }

  // Every wrapper's zero_grad.
  void zero_grad();
  // Every wrapper's initialize_count_status.
  void initialize_count_status(int64_t init_counts, int64_t max_counts);
  // Each wrapper's learning_rates under "<name>.lr", as mmengine's get_lr
  // names them.
  std::vector<std::pair<std::string, double>> learning_rates();

 private:
  std::vector<Item> wrappers_;
};

}  // namespace engine::optim
