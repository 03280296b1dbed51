#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/compat/autograd.h"
#include "engine/dist/group.h"
#include "engine/dist/work.h"
#include "engine/model/comm_hooks/comm_hook.h"
#include "engine/model/named_parameter.h"
#include "engine/optim/grad_sync.h"

namespace engine::model {

struct ReducerOptions {
  int64_t first_bucket_cap_bytes = int64_t{1} << 20;
  int64_t bucket_cap_bytes = int64_t{25} << 20;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  // PyTorch's static_graph: every synchronised backward reaches the same
  // parameters, each as many times, as the first one. The first is reduced
  // at its end (a parameter's gradient may arrive several times, as under
  // reentrant backwards); from then on a parameter is ready at its last
  // arrival, the unused ones are known without searching the graph or
  // agreeing on them, and the buckets follow the first backward's order
  // even with find_unused_parameters.
  bool static_graph = false;
  // Called on the backward thread as each bucket's all_reduce is launched,
  // with the bucket's position and its parameters' indices (tests and traces
  // watch the overlap with backward through it).
  std::function<void(size_t bucket, const std::vector<size_t>& params)> on_bucket_launch;
  // Reduces each bucket in place of the division and all_reduce; null: none.
  CommHookPtr comm_hook;
};

// What a reducer measured and decided, for DDP's logging data. Times are
// sums over the synchronised backwards, in nanoseconds of the steady clock.
struct ReducerStats {
  int64_t iterations = 0;                     // synchronised backwards finished
  std::vector<int64_t> bucket_bytes;          // the first layout's buckets
  std::vector<int64_t> rebuilt_bucket_bytes;  // empty until the rebuild
  // The last synchronised backward's: parameters in the order their
  // gradients were ready, and those without a gradient on this rank.
  std::vector<size_t> ready_order;
  std::vector<size_t> unused;
  // From prepare_for_backward (else the first gradient) to the last
  // gradient; from the first bucket's launch to the end of every
  // reduction; from the first bucket's launch to the last gradient.
  int64_t backward_compute_ns = 0;
  int64_t backward_comm_ns = 0;
  int64_t overlap_ns = 0;
};

// PyTorch DDP's reducer: gradients grouped in buckets (reverse parameter
// order at first, the observed order after the first synced backward, agreed
// through rank 0); a hook on each parameter's gradient accumulator marks it
// ready during backward; a bucket whose gradients are all ready is divided by
// the group size and all-reduced asynchronously, buckets strictly in order on
// every rank; at the end of backward the reductions are awaited and written
// back into the gradients. With a communication hook, the bucket holds the
// undivided gradients and the hook reduces it (comm_hooks/comm_hook.h).
//
// A backward is synchronised when sync is enabled as its first gradient
// arrives; with sync disabled gradients just accumulate locally.
class Reducer : public optim::GradSyncSwitch {
 public:
  Reducer(std::vector<NamedParameter> params, dist::GroupPtr group, ReducerOptions options);
  ~Reducer() override;
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Called after a forward whose backward will be synchronised, with the
  // tensors the loss is computed from: the backward starts where it reaches
  // them (else at the first gradient). With find_unused_parameters the
  // parameters they do not reach are marked ready as soon as backward starts
  // (otherwise only at its end). The reducer must outlive their graph.
  void prepare_for_backward(const std::vector<at::Tensor>& outputs);

  // On a rank that has run out of inputs (Join): the collectives of a
  // synchronised backward. With `own_gradients` this rank contributes the
  // gradients it holds (what it accumulated since its last synchronised
  // backward; zeros where it has none) and takes the group's result into
  // them, as the ranks still training do; else zeros, its gradients left
  // alone. No communication hook.
  void shadow_backward(bool own_gradients);

  bool grad_sync_enabled() const override;
  void set_grad_sync_enabled(bool enabled) override;

  // Collective over the group: every rank registers an equal hook (the same
  // describe()), before the first synchronised backward, at most once;
  // InvalidArgument otherwise, on every rank for a hook that differs.
  void register_comm_hook(CommHookPtr hook);
  const CommHookPtr& comm_hook() const { return options_.comm_hook; }

  // Each bucket's parameter indices, in launch order.
  std::vector<std::vector<size_t>> buckets() const;
  // The parameter order the buckets were rebuilt from after the first
  // synchronised backward (the same on every rank); empty before.
  std::vector<size_t> rebuilt_order() const;
  // Rebuilds the buckets from an order rebuilt_order() gave, as a resumed
  // run must to meet a hook's per-bucket state; InvalidArgument when it is
  // not a permutation of the parameters.
  void restore_rebuilt_order(const std::vector<size_t>& order);
  const std::vector<NamedParameter>& parameters() const { return params_; }
  ReducerStats stats() const;
  const ReducerOptions& options() const { return options_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;
    at::Tensor flat;
    size_t pending = 0;
  };

  void build_buckets(const std::vector<size_t>& order);
  at::Tensor zeros_for_bucket(int64_t numel, const at::Tensor& like) const;
  void register_hooks();
  at::Tensor slot(size_t param) const;
  void point_grad_at_slot(size_t param);

  void on_grad_ready(size_t param);
  void on_static_grad_ready(size_t param);
  void begin_backward();
  void finish_first_static_backward();
  [[noreturn]] void refuse_changed_graph(const std::string& what) const;
  void mark_ready(size_t param);
  void fill_slot(size_t param);
  void launch_complete_buckets();
  dist::WorkPtr launch(Bucket& bucket, size_t index);
  void finalize_backward();
  void handle_never_ready();
  void write_back(const std::vector<bool>& globally_used);
  void record_backward(const std::vector<bool>& locally_used);
  std::vector<bool> agree_on_used(const std::vector<bool>& locally_used);
  std::vector<bool> globally_used(const std::vector<bool>& locally_used);
  void rebuild_from_arrival_order();
  void record_rebuilt_sizes();

  std::vector<NamedParameter> params_;
  dist::GroupPtr group_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> location_;  // param -> (bucket, slot)
  std::vector<compat::NodePtr> accumulators_;
  std::vector<uintptr_t> hook_keys_;

  mutable std::mutex mutex_;
  bool sync_enabled_ = true;
  bool in_backward_ = false;
  bool awaiting_first_rebuild_;
  std::vector<bool> ready_;
  std::vector<bool> locally_used_;
  std::vector<bool> unreached_;    // set by prepare_for_backward, used once
  at::Tensor world_size_divisor_;  // a 0-dim tensor, for div_out
  std::vector<size_t> arrival_order_;
  // static_graph: each parameter's arrivals in this backward, in the first
  // one (empty until it ends), and which parameters some rank used then.
  std::vector<int> arrivals_;
  std::vector<int> static_arrivals_;
  std::vector<bool> static_globally_used_;
  std::vector<size_t> first_arrival_order_;
  std::vector<size_t> rebuilt_order_;
  bool backward_seen_ = false;
  std::vector<at::Tensor> hook_results_;  // per launched bucket
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> backward_start_, comm_start_, compute_end_;
  ReducerStats stats_;
  size_t next_bucket_ = 0;
  std::vector<dist::WorkPtr> works_;
};

// For each of `params`, whether the autograd graph of `outputs` reaches it.
std::vector<bool> reached_parameters(const std::vector<at::Tensor>& outputs,
                                     const std::vector<at::Tensor>& params);

}  // namespace engine::model
