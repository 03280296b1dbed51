#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/dist/group.h"
#include "engine/model/join/join.h"
#include "engine/model/wrappers/model_wrapper.h"
#include "engine/model/wrappers/reducer.h"
#include "engine/optim/grad_sync.h"

namespace engine::model {

struct DDPOptions {
  // After each loss, report every trainable parameter the loss does not reach.
  bool detect_anomalous_params = false;
  // Broadcast buffers from the group's first rank before each training forward.
  bool broadcast_buffers = true;
  bool find_unused_parameters = false;
  // Every backward reaches the same parameters as the first (ReducerOptions).
  bool static_graph = false;
  // The first bucket holds 1 MiB as PyTorch's (or bucket_cap_mb if smaller).
  double bucket_cap_mb = 25;
  // Gradients become views into the buckets. Zero them with
  // OptimWrapper::zero_grad: LibTorch 1.13's Optimizer::zero_grad refuses views.
  bool gradient_as_bucket_view = false;
  dist::GroupPtr process_group;  // nullptr: the default group
  // Sees each bucket's all_reduce launch (see ReducerOptions).
  std::function<void(size_t bucket, const std::vector<size_t>& params)> on_bucket_launch;
  // Registered by the constructor (see register_comm_hook); null: none.
  CommHookPtr comm_hook;
};

// The reducer options that `options` describes.
ReducerOptions reducer_options(const DDPOptions& options);
// The group a wrapper runs on: `requested`, or the default group when it is
// null. InvalidArgument, naming `wrapper`, when the process is not
// distributed or this rank is not in the group.
dist::GroupPtr wrapper_group(const dist::GroupPtr& requested, const std::string& wrapper);

// mmengine's MMDistributedDataParallel on the engine's reducer. Construction
// is collective: the parameters are checked to be the same on every rank,
// then parameters and buffers are broadcast from the group's first rank.
//
// Joinable (engine/model/join): a rank that joined shadows the buffer
// broadcast (from the highest rank still training) and, when the others
// synchronise, the bucket all_reduces, so the gradient is the sum of the
// training ranks' divided by the group size, as PyTorch's. A rank that
// trained under the Join through train_step also contributes what it had
// accumulated and not yet reduced, takes the group's gradients, and steps
// its optimizer wrapper as the others step theirs (so an optimizer whose
// step communicates, ZeroRedundancyOptimizer, joins too, and accumulation
// groups go on in step after the Join); a rank that did not adds zeros. At
// the end every rank takes the parameters and buffers of a rank that
// trained longest. Its train_step's log values stay per rank inside a Join.
// Not with a communication hook or a synchronised BatchNorm, whose
// collectives a joined rank cannot match (InvalidArgument on every rank).
class MMDistributedDataParallel : public ModelWrapper,
                                  public optim::GradSyncSwitch,
                                  public Joinable {
 public:
  MMDistributedDataParallel(std::shared_ptr<BaseModel> module, DDPOptions options = {});
  ~MMDistributedDataParallel() override;

  // The module's forward; a training forward with gradients enabled and sync
  // on prepares the reducer for the backward that follows.
  TensorDict forward(const TensorDict& data, ForwardMode mode) override;

  // preprocess -> forward("loss") -> parse_losses -> update_params, inside
  // the optim wrapper's context (no sync on intermediate accumulation steps).
  TensorDict train_step(const TensorDict& data, optim::OptimWrapper& optim_wrapper) override;
  using BaseModel::train_step;

  // Gradients accumulate locally for as long as the scope lives.
  optim::NoSyncScope no_sync() { return optim::NoSyncScope(this); }
  bool grad_sync_enabled() const override { return reducer_->grad_sync_enabled(); }
  void set_grad_sync_enabled(bool enabled) override { reducer_->set_grad_sync_enabled(enabled); }

  // PyTorch's DDP.register_comm_hook. Collective: every rank of the group
  // registers an equal hook before the first synchronised backward, once.
  void register_comm_hook(CommHookPtr hook) { reducer_->register_comm_hook(std::move(hook)); }

  const Reducer& reducer() const { return *reducer_; }
  Reducer& reducer() { return *reducer_; }
  // The parameters the last loss did not reach (detect_anomalous_params).
  const std::vector<std::string>& anomalous_params() const { return anomalous_params_; }
  const DDPOptions& options() const { return options_; }
  const dist::GroupPtr& group() const { return group_; }
  const dist::GroupPtr& join_group() const override { return group_; }
  void shadow_iteration(const JoinRound& round) override;
  void finish_join(int last_rank) override;
  // Training forwards whose backward is synchronised, and their summed time
  // in nanoseconds (for DDP's logging data).
  int64_t timed_forwards() const { return timed_forwards_; }
  int64_t forward_ns() const { return forward_ns_; }

 private:
  void detect_anomalous_params(const at::Tensor& loss);
  void refuse_unshadowable_join();

  DDPOptions options_;
  dist::GroupPtr group_;
  std::unique_ptr<Reducer> reducer_;
  std::vector<std::string> anomalous_params_;
  bool joining_ = false;  // the last training forward ran inside a Join
  // The optimizer wrapper of this rank's last train_step inside a Join,
  // which shadow iterations step.
  optim::OptimWrapper* shadow_optim_ = nullptr;
  int64_t timed_forwards_ = 0;
  int64_t forward_ns_ = 0;
};

// The parameters of `module` that require grad, with their names (its
// children's too unless `recurse` is false).
std::vector<NamedParameter> trainable_parameters(torch::nn::Module& module, bool recurse = true);

// trainable_parameters(module), and the
// collective setup every DDP does: check them across ranks and broadcast
// them and the buffers from the group's first rank.
std::vector<NamedParameter> synchronised_parameters(torch::nn::Module& module,
                                                    const dist::GroupPtr& group);

// Collective: overwrites `module`'s parameters and buffers with the
// group's rank `source`'s, the first by default (mmengine's and PyTorch's
// sync_module_states).
void broadcast_module_state(torch::nn::Module& module, const dist::GroupPtr& group, int source = 0);

// Broadcasts `module`'s current buffers (looked up afresh: a buffer that was
// reassigned is the new tensor) from the group's rank `source`.
void broadcast_buffers(torch::nn::Module& module, const dist::GroupPtr& group, int source = 0);

}  // namespace engine::model
