#pragma once

#include <ATen/core/Tensor.h>
#include <rapidcheck.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/base_model.h"

// Small random networks and data for the wrapper properties: an optional
// convolution, a tanh MLP trunk and several heads; a head is skipped by a
// forward whose batch does not use it, so unused parameters can depend on
// the rank. Everything is float64.
namespace nets {

struct NetSpec {
  int64_t inputs = 4;          // features, or channels with a convolution
  int64_t image = 0;           // > 0: inputs are [channels, image, image]
  std::vector<int64_t> trunk;  // hidden widths
  int64_t heads = 1;
  int64_t outputs = 2;
  bool batch_norm = false;  // an engine BatchNorm after the first trunk layer
  // Two parameters of the root itself: a 0-dimensional "scale" of the
  // output and an empty "nothing" (no elements) added to it.
  bool odd_parameters = false;
  // The trunk (and its BatchNorm) inside a child "body" with a parameter
  // of its own, "gain", scaling its output: a parent with parameters above
  // its children, a unit that may hold units. The body also holds "meter",
  // a module with a buffer and no parameter: "forwards", counting the
  // training forwards (alike on every rank and in one process).
  bool nested = false;
  // With two heads or more, every head's weight is head 0's: one parameter
  // registered in several modules, as tied embeddings are.
  bool tied = false;
};

rc::Gen<NetSpec> net_spec();
std::string describe(const NetSpec& spec);

class TestNet : public engine::model::BaseModel {
 public:
  explicit TestNet(const NetSpec& spec);
  // "inputs", "target", "head_mask" [batch, heads] (a head runs when its
  // column is not all zero, weighted by it per sample) and "head_order".
  engine::model::TensorDict forward(const engine::model::TensorDict& data,
                                    engine::model::ForwardMode mode) override;

 private:
  NetSpec spec_;
  std::vector<std::shared_ptr<torch::nn::Module>> layers_;
};

std::shared_ptr<TestNet> make_net(const NetSpec& spec);

// Copies `from`'s parameters and buffers into `to` (same spec).
void copy_state(torch::nn::Module& from, torch::nn::Module& to);

// Redraws every parameter and buffer of `module` from `seed` (running
// variances stay positive, counters become small integers), so that a rank
// starts from a state of its own that only a wrapper's broadcast can fix.
void scramble_state(torch::nn::Module& module, uint64_t seed);

// Named parameter values, detached clones.
std::map<std::string, at::Tensor> snapshot(torch::nn::Module& module);

// Named buffer values, detached clones.
std::map<std::string, at::Tensor> buffers_of(torch::nn::Module& module);

// One rank's batch: `batch` samples from `seed`, heads used as `used_heads`
// and run in `head_order` (a permutation of the heads; empty: in order).
// The order is rank-dependent control flow: backward reaches the heads'
// parameters in the reverse of it.
engine::model::TensorDict make_batch(const NetSpec& spec, int64_t batch, uint64_t seed,
                                     const std::vector<bool>& used_heads,
                                     const std::vector<int64_t>& head_order = {});

// The batches of all ranks, concatenated along dimension 0 (the first
// batch's head order).
engine::model::TensorDict concatenate(const std::vector<engine::model::TensorDict>& batches);

}  // namespace nets
