#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/compat/autocast.h"
#include "engine/optim/grad_sync.h"

namespace torch::optim {
class Optimizer;
}
namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace engine::optim {

// mmengine's clip_grad: {"type": "norm", max_norm, norm_type} or
// {"type": "value", clip_value}.
struct ClipGrad {
  enum class Kind { kNorm, kValue };
  Kind kind = Kind::kNorm;
  double max_norm = 1.0;
  double norm_type = 2.0;
  double clip_value = 1.0;
};

struct OptimWrapperOptions {
  // Gradients of this many consecutive calls to update_params are summed
  // before one optimizer step; the loss is divided by it.
  int64_t accumulative_counts = 1;
  std::optional<ClipGrad> clip_grad;
};

// What optim_context opens around a forward and backward: the model's
// no_sync inside an accumulation group, and autocast where the wrapper
// computes in lower precision. Closes both when it ends.
class OptimContext {
 public:
  explicit OptimContext(GradSyncSwitch* no_sync_target) : no_sync_(no_sync_target) {}
  OptimContext(GradSyncSwitch* no_sync_target, c10::DeviceType device, c10::ScalarType dtype)
      : no_sync_(no_sync_target) {
    autocast_.emplace(device, /*enabled=*/true, dtype);
  }

 private:
  NoSyncScope no_sync_;
  std::optional<compat::AutocastScope> autocast_;
};

// mmengine's OptimWrapper around a LibTorch optimizer: update_params(loss) is
// backward, then every accumulative_counts calls step and zero_grad. The
// intermediate backwards run inside optim_context's no-sync scope.
class OptimWrapper {
 public:
  OptimWrapper(std::shared_ptr<torch::optim::Optimizer> optimizer,
               OptimWrapperOptions options = {});

  // Tells the wrapper where a run starts and ends, so that a last group of
  // fewer than accumulative_counts steps is scaled by its real size
  // (mmengine's initialize_count_status).
  void initialize_count_status(int64_t init_counts, int64_t max_counts);

  void update_params(const at::Tensor& loss);
  // On a rank that has joined (engine/model/join), for a backward the ranks
  // still training made, the group's gradients already in this rank's
  // parameters: what update_params does after its backward (the backward
  // counted; at the end of an accumulation group, step and zero_grad), so
  // that this rank steps as they do and stays in their accumulation group.
  void update_params_shadowed();
  // The loss divided by the size of the current accumulation group.
  at::Tensor scale_loss(const at::Tensor& loss) const;
  virtual void backward(const at::Tensor& loss);
  // Clips (if configured) and steps the optimizer, between the step hooks
  // attached to its parameters (engine/optim/step_hook.h), unless
  // prepare_step says the step must be skipped.
  void step();
  void zero_grad();

  // True after the backward that completes an accumulation group.
  bool should_update() const;
  // True when the next backward completes an accumulation group, i.e. when
  // its gradients must be synchronised across ranks.
  bool should_sync() const;
  // A scope for forward and backward: disables `model`'s gradient sync unless
  // should_sync(). `model` may be nullptr (nothing to switch).
  virtual OptimContext optim_context(GradSyncSwitch* model) const;

  int64_t inner_count() const { return inner_count_; }
  // The total gradient norm the last clipping by norm measured (before
  // clipping; mmengine logs it as grad_norm): over every rank's share where
  // a sharding wrapper holds the parameters (engine/optim/grad_norm.h).
  std::optional<double> last_grad_norm() const { return last_grad_norm_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  // The first parameter group's learning rate under "lr", as mmengine's
  // get_lr names it for the logs.
  std::vector<std::pair<std::string, double>> learning_rates();

  // The optimizer's state (mmengine's state_dict is the optimizer's).
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

  // What the wrapper itself keeps across a resume, beside the optimizer's
  // state (AmpOptimWrapper: its loss scaler), by name; empty here.
  virtual c10::impl::GenericDict state() const;
  // Takes back what state() gave, ignoring what it does not keep (a run
  // may resume without the wrapper that saved). InvalidArgument saying what
  // is wrong if an entry it keeps is not of the form state() gives.
  virtual void load_state(const c10::impl::GenericDict& saved);

 protected:
  // Between the step hooks' before_step and clipping, with the gradients
  // the optimizer will see: false skips clipping and the optimizer step
  // (the after_step hooks still run). Collective where it communicates:
  // every rank calls it at every step.
  virtual bool prepare_step() { return true; }
  std::vector<at::Tensor> parameters_with_grad() const;

 private:
  void step_at_group_end();
  void clip_gradients();
  double clip_by_global_norm(const std::vector<at::Tensor>& params, const ClipGrad& clip);

  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  OptimWrapperOptions options_;
  int64_t inner_count_ = 0;
  int64_t max_counts_ = -1;  // -1: unknown, every group is full
  std::optional<double> last_grad_norm_;
};

}  // namespace engine::optim
