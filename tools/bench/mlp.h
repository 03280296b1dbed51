#pragma once

#include <torch/nn/modules/container/modulelist.h>

#include <cstdint>
#include <string>

#include "engine/model/base_model.h"

// The benchmarks' MLP: width -> hidden_layers x (width -> width, ReLU) -> 10,
// cross-entropy loss. Its Linear layers run through call_unit, so that
// MMFullyShardedDataParallel can make each one a unit (plain calls
// elsewhere). torch_ddp_peer.py builds the same layers.
namespace bench {

struct MlpShape {
  int64_t width;
  int hidden_layers;
};

// small: 1024 x 3, 3.16M parameters; large: 2048 x 6, 25.2M; xl: 4096 x 6,
// 100.7M; {0, 0} for any other name.
MlpShape mlp_shape(const std::string& model);

class Mlp : public engine::model::BaseModel {
 public:
  explicit Mlp(MlpShape shape);
  engine::model::TensorDict forward(const engine::model::TensorDict& data,
                                    engine::model::ForwardMode mode) override;

 private:
  torch::nn::ModuleList linears_;
};

// {"inputs": [batch, width] normal, "labels": [batch] in 0-9}.
engine::model::TensorDict mlp_batch(MlpShape shape, int64_t batch);

// Returns once the kernels queued so far on `device`'s current stream have
// run: a step on a GPU returns as soon as its last kernels are queued, and
// its time must include them (nothing to wait for on the CPU).
void finish_queued_work(at::Device device);

}  // namespace bench
