#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/dist/group.h"
#include "engine/optim/optimizer_state.h"

namespace engine::optim {

// PyTorch's ZeroRedundancyOptimizer (ZeRO stage 1 beside DDP): every rank
// holds the whole parameters and gradients, but the optimizer state of its
// own share of the parameters only. The parameters are dealt out whole, as
// PyTorch deals them: largest first, each to the rank that holds the fewest
// elements so far (the lowest such rank on a tie). step() steps this rank's
// share with a local optimizer of the wrapped type, then every parameter
// comes from its owner by broadcast, so every rank ends with the values the
// wrapped optimizer alone would have given.
//
// One param group; its options (the learning rate a scheduler sets) are
// handed to the local optimizer at every step. The parameters must be whole
// on every rank: ones a sharding wrapper holds (FSDP, ZeRO) are refused,
// their wrappers shard the optimizer state already.
//
// Checkpoints: the state has the wrapped optimizer's layout, for every
// parameter, so that a plain optimizer of that type resumes from it and the
// other way round. Gathering it is collective: consolidate_state_dict on
// every rank (BaseStrategy::save_checkpoint does), then optimizer_state() on
// the receiving rank (optimizer_state.h). Loading takes the whole state on
// every rank, each keeping its share.
class ZeroRedundancyOptimizer : public torch::optim::Optimizer {
 public:
  using LocalFactory =
      std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

  // `make_local` builds the wrapped optimizer over a share (perhaps none).
  // `group` nullptr: the default group, or this process alone when not
  // distributed. InvalidArgument for a parameter a sharding wrapper holds.
  ZeroRedundancyOptimizer(std::vector<at::Tensor> params, const LocalFactory& make_local,
                          dist::GroupPtr group = nullptr);

  at::Tensor step(LossClosure closure = nullptr) override;
  // LibTorch's archive of an optimizer cannot hold other ranks' state:
  // InvalidArgument pointing at optimizer_state() and load_optimizer_state().
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // The group rank that steps parameter `index` (its position in
  // param_groups()[0]).
  int owner_of(size_t index) const { return owners_.at(index); }
  const torch::optim::Optimizer& local() const { return *local_; }

  // Collective over the group: every rank's share of the state, gathered
  // on group rank `to` for state().
  void consolidate_state_dict(int to = 0);
  // The whole state, on the rank that consolidated it since the last step;
  // InvalidArgument elsewhere or when stale.
  OptimizerState state() const;
  // Every rank passes the whole state and keeps its share.
  void load_state(const OptimizerState& state);

 private:
  void hand_options_to_local();

  dist::GroupPtr group_;
  std::vector<int> owners_;   // per parameter, a group rank
  std::vector<size_t> mine_;  // positions of this rank's share
  std::shared_ptr<torch::optim::Optimizer> local_;
  std::optional<OptimizerState> consolidated_;
};

// consolidate_state_dict(0) where `optimizer` is a ZeroRedundancyOptimizer;
// nothing for any other. Collective then: every rank calls it.
void consolidate_if_sharded(torch::optim::Optimizer& optimizer);

}  // namespace engine::optim
