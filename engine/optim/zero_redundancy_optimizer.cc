#include "engine/optim/zero_redundancy_optimizer.h"

#include <torch/optim/sgd.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "engine/dist/collectives.h"
#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/dist/objects.h"
#include "engine/optim/grad_norm.h"

namespace engine::optim {
namespace {

constexpr const char* kName = "ZeroRedundancyOptimizer";

[[noreturn]] void refuse_for_zero(const std::string& what) {
  throw dist::InvalidArgument(dist::on_rank(dist::get_rank(), std::string(kName) + ": " + what));
}

int group_size(const dist::GroupPtr& group) {
  return dist::is_distributed() ? dist::get_world_size(group) : 1;
}

int group_rank(const dist::GroupPtr& group) {
  return dist::is_distributed() ? dist::get_rank(group) : 0;
}

// PyTorch's partition: largest first, to the rank with the fewest elements.
std::vector<int> deal_out(const std::vector<at::Tensor>& params, int ranks) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> held(ranks, 0);
  std::vector<int> owners(params.size());
  for (size_t index : order) {
    const int rank = static_cast<int>(std::min_element(held.begin(), held.end()) - held.begin());
    owners[index] = rank;
    held[rank] += params[index].numel();
  }
  return owners;
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<at::Tensor> params,
                                                 const LocalFactory& make_local,
                                                 dist::GroupPtr group)
    : torch::optim::Optimizer({torch::optim::OptimizerParamGroup(params)},
                              std::make_unique<torch::optim::SGDOptions>(0)),
      group_(std::move(group)),
      owners_(deal_out(params, group_size(group_))) {
  for (const auto& param : params) {
    if (grad_norm_source_of(param) != nullptr) {
      refuse_for_zero(
          "a sharding wrapper (FSDP, ZeRO) holds these parameters and shards their "
          "optimizer state already; use a plain optimizer with it");
    }
  }
  const int me = group_rank(group_);
  std::vector<at::Tensor> share;
  for (size_t i = 0; i < params.size(); ++i) {
    if (owners_[i] != me) continue;
    mine_.push_back(i);
    share.push_back(params[i]);
  }
  local_ = make_local(std::move(share));
  defaults_ = local_->defaults().clone();
  param_groups_[0].set_options(local_->param_groups().at(0).options().clone());
}

void ZeroRedundancyOptimizer::hand_options_to_local() {
  local_->param_groups().at(0).set_options(param_groups_[0].options().clone());
}

at::Tensor ZeroRedundancyOptimizer::step(LossClosure closure) {
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  consolidated_.reset();
  hand_options_to_local();
  local_->step();
  if (group_size(group_) == 1) return loss;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> values;
  std::vector<dist::WorkPtr> works;
  const auto& params = param_groups_[0].params();
  for (size_t i = 0; i < params.size(); ++i) {
    values.push_back(params[i].detach());
    const int owner = group_ ? group_->global_rank_of(owners_[i]) : owners_[i];
    works.push_back(dist::broadcast_async(values.back(), owner, group_));
  }
  for (auto& work : works) work->wait();
  return loss;
}

void ZeroRedundancyOptimizer::save(torch::serialize::OutputArchive&) const {
  refuse_for_zero(
      "its state spans ranks and has no LibTorch archive; gather it with "
      "consolidate_state_dict on every rank, then optim::optimizer_state()");
}

void ZeroRedundancyOptimizer::load(torch::serialize::InputArchive&) {
  refuse_for_zero(
      "its state spans ranks and has no LibTorch archive; load it with "
      "optim::load_optimizer_state() on every rank");
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  hand_options_to_local();
  const OptimizerState share = optimizer_state(*local_);
  c10::impl::GenericDict by_index(c10::IntType::get(), c10::AnyType::get());
  for (size_t k = 0; k < mine_.size(); ++k) {
    by_index.insert(static_cast<int64_t>(mine_[k]), share.params[k]);
  }
  const size_t count = owners_.size();
  OptimizerState whole{std::vector<ValueDict>(count, empty_value_dict()),
                       share.group_options,
                       {static_cast<int64_t>(count)}};
  std::vector<c10::IValue> shares = {by_index};
  if (group_size(group_) > 1) {
    const int dst = group_ ? group_->global_rank_of(to) : to;
    auto gathered = dist::gather_object(by_index, dst, group_);
    consolidated_.reset();
    if (!gathered) return;
    shares = std::move(*gathered);
  }
  for (const auto& from_rank : shares) {
    for (const auto& item : from_rank.toGenericDict()) {
      whole.params.at(item.key().toInt()) = item.value().toGenericDict();
    }
  }
  consolidated_ = std::move(whole);
}

OptimizerState ZeroRedundancyOptimizer::state() const {
  if (!consolidated_) {
    refuse_for_zero(
        "no consolidated state on this rank since the last step: call "
        "consolidate_state_dict on every rank first, then read it on the receiving rank");
  }
  return *consolidated_;
}

void ZeroRedundancyOptimizer::load_state(const OptimizerState& state) {
  if (state.group_sizes.size() != 1 || state.params.size() != owners_.size()) {
    refuse_for_zero("state for " + std::to_string(state.params.size()) + " parameters in " +
                    std::to_string(state.group_sizes.size()) + " groups; this one has " +
                    std::to_string(owners_.size()) + " in one group");
  }
  OptimizerState share{{}, state.group_options, {static_cast<int64_t>(mine_.size())}};
  for (size_t index : mine_) share.params.push_back(state.params[index]);
  load_optimizer_state(*local_, share);
  param_groups_[0].set_options(local_->param_groups().at(0).options().clone());
  consolidated_.reset();
}

void consolidate_if_sharded(torch::optim::Optimizer& optimizer) {
  if (auto* zero = dynamic_cast<ZeroRedundancyOptimizer*>(&optimizer))
    zero->consolidate_state_dict();
}

}  // namespace engine::optim
