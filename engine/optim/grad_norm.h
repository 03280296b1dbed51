#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace engine::optim {

// Parameters whose gradients are spread over ranks (sharded, or replicated
// after a reduction), so that no rank can compute their norm alone. A
// sharding wrapper attaches itself to its parameters; OptimWrapper's clipping
// by norm then asks it for their share of the global norm instead of taking
// each rank's local gradients for the whole (mmengine's clip_grad_norm_ on
// local shards gives every rank a different norm).
class GradNormSource {
 public:
  virtual ~GradNormSource() = default;
  // Collective over the source's ranks, called by every rank with the same
  // parameters (its own, in the same order): the sum over every element of
  // their gradients, counted once across the ranks, of |g|^norm_type; the
  // largest |g| for an infinite norm_type.
  virtual double global_power_sum(const std::vector<at::Tensor>& params, double norm_type) = 0;
  // Collective like global_power_sum: true on every rank of the source when
  // any rank's share of these parameters' gradients holds an inf or a NaN.
  virtual bool any_non_finite(const std::vector<at::Tensor>& params) = 0;
};

// Attach and detach are keyed by the parameter's TensorImpl, which set_data
// keeps.
void attach_grad_norm_source(const at::Tensor& param, GradNormSource* source);
void detach_grad_norm_source(const at::Tensor& param);
GradNormSource* grad_norm_source_of(const at::Tensor& param);

// `params` split by where their gradients live: those of each source, in
// the order the sources first appear, and the gradients of the others
// (this rank's own, or replicated).
struct GradsBySource {
  std::vector<GradNormSource*> sources;
  std::vector<std::vector<at::Tensor>> owned;  // parameters, one list per source
  std::vector<at::Tensor> local_grads;
};
GradsBySource group_by_source(const std::vector<at::Tensor>& params);

// Whether any gradient of `params` holds an inf or a NaN on any rank that
// shares it: the local gradients on this rank, each source's over its
// ranks. Collective where a source holds some of them; every rank of those
// sources passes its own parameters, in the same order.
bool any_non_finite_gradient(const std::vector<at::Tensor>& params);

// Whether any of `grads` holds an inf or a NaN, on this rank alone.
bool local_non_finite(const std::vector<at::Tensor>& grads);

// sum |g|^p over `grads` (max |g| for an infinite p), on this rank alone.
double local_power_sum(const std::vector<at::Tensor>& grads, double norm_type);

}  // namespace engine::optim
