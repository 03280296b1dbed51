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
};

// Attach and detach are keyed by the parameter's TensorImpl, which set_data
// keeps.
void attach_grad_norm_source(const at::Tensor& param, GradNormSource* source);
void detach_grad_norm_source(const at::Tensor& param);
GradNormSource* grad_norm_source_of(const at::Tensor& param);

// sum |g|^p over `grads` (max |g| for an infinite p), on this rank alone.
double local_power_sum(const std::vector<at::Tensor>& grads, double norm_type);

}  // namespace engine::optim
