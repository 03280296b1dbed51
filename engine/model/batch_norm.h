#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "engine/dist/group.h"

namespace engine::model {

struct BatchNormOptions {
  explicit BatchNormOptions(int64_t num_features) : num_features(num_features) {}
  int64_t num_features;
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

// Batch normalisation over dimension 1 of inputs of any rank (BatchNorm1d,
// 2d and 3d in one module), the same parameters and buffers as
// torch::nn::BatchNorm*d, that can be switched to synchronised mode.
//
// Synchronised (PyTorch's SyncBatchNorm), a training forward normalises with
// the statistics of the whole group's batch: sums and counts all-reduced,
// then the centred squares (two small all_reduces, exact with unequal batch
// sizes and ranks without samples); backward all-reduces the two sums the
// input gradient needs; weight and bias gradients stay local (DDP averages
// them). Every rank of the group must run the same forwards and backwards.
// The running statistics may have another dtype than the input (FSDP's
// buffer_dtype); they are updated in their own.
//
// Why a switch and not PyTorch's module swap: a C++ module calls its children
// through typed members, so a converter cannot replace them from outside.
// convert_sync_batchnorm flips the switch, which trivially keeps parameters,
// buffers and the train/eval flag.
class BatchNormImpl : public torch::nn::Module {
 public:
  explicit BatchNormImpl(BatchNormOptions options);

  at::Tensor forward(const at::Tensor& input);

  // Synchronises training forwards over `group`; nullptr means the default
  // group as it is at each forward, so a layer switched before init_dist
  // synchronises once a group exists (and stays local while none does).
  void synchronise(dist::GroupPtr group = nullptr);
  // Back to local statistics.
  void desynchronise();
  bool is_sync() const { return sync_with_.has_value(); }
  // The group a forward would synchronise over now; nullptr when local.
  dist::GroupPtr sync_group() const;

  const BatchNormOptions& options() const { return options_; }

  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  at::Tensor forward_synchronised(const at::Tensor& input, const dist::GroupPtr& group);

  BatchNormOptions options_;
  // nullopt: local statistics; nullptr: the default group at each forward.
  std::optional<dist::GroupPtr> sync_with_;
};
TORCH_MODULE(BatchNorm);

// A BatchNorm that starts synchronised over `group` (nullptr: the default
// group at each forward).
BatchNorm SyncBatchNorm(BatchNormOptions options, dist::GroupPtr group = nullptr);

// Switches every BatchNorm in `module`'s tree to synchronised mode over
// `group` (nullptr: the default group at each forward, so this may run
// before init_dist, as in mmengine); returns how many. Stock
// torch::nn::BatchNorm*d layers cannot be switched: InvalidArgument naming
// them and saying to build with engine::model::BatchNorm instead.
int convert_sync_batchnorm(torch::nn::Module& module, dist::GroupPtr group = nullptr);
// Switches every BatchNorm back to local statistics; returns how many.
int revert_sync_batchnorm(torch::nn::Module& module);
// The name of the first BatchNorm of `module`'s tree in synchronised mode
// (as named_modules gives it), or nullopt when none is.
std::optional<std::string> find_sync_batchnorm(const torch::nn::Module& module);

}  // namespace engine::model
