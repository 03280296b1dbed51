#include "engine/model/join/join.h"

#include <ATen/ops/zeros.h>

#include <algorithm>
#include <string>

#include "engine/dist/errors.h"
#include "engine/dist/helpers.h"

namespace engine::model {
namespace {

thread_local Join* current_join = nullptr;
thread_local bool shadowing_now = false;

}  // namespace

int JoinRound::active_count() const {
  return static_cast<int>(std::count(active.begin(), active.end(), true));
}

int JoinRound::authoritative_rank() const {
  for (int rank = static_cast<int>(active.size()) - 1; rank >= 0; --rank) {
    if (active[rank]) return rank;
  }
  return -1;
}

Join::Join(std::vector<Joinable*> joinables, JoinOptions options)
    : joinables_(std::move(joinables)), options_(options) {
  if (joinables_.empty()) throw dist::InvalidArgument("Join: no joinable given");
  group_ = joinables_.front()->join_group();
  for (const Joinable* joinable : joinables_) {
    if (joinable->join_group() != group_) {
      throw dist::InvalidArgument(
          dist::on_rank(group_->my_global_rank(),
                        "Join: the joinables run on different groups; join them in "
                        "Joins of their own"));
    }
  }
  if (current_join != nullptr) {
    throw dist::InvalidArgument(
        dist::on_rank(group_->my_global_rank(), "Join: a Join is active on this thread already"));
  }
  if (options_.enable) current_join = this;
}

Join::~Join() {
  if (current_join == this) current_join = nullptr;
}

JoinRound Join::exchange(Part part, bool synchronises) {
  const int size = group_->size();
  at::Tensor flags = at::zeros({size + 1}, at::kInt);
  if (part == Part::kActive) {
    flags[group_->rank()] = 1;
    flags[size] = synchronises ? 1 : 0;
  }
  if (part == Part::kCannotShadow) flags[group_->rank()] = -1;
  dist::all_reduce_anywhere(flags, "sum", group_);
  JoinRound round;
  auto values = flags.accessor<int, 1>();
  for (int rank = 0; rank < size; ++rank) {
    if (values[rank] < 0) {
      throw dist::InvalidArgument(dist::on_rank(
          group_->my_global_rank(),
          "Join: rank " + std::to_string(group_->global_rank_of(rank)) + " of " +
              group_->describe() +
              " joined before its first training step, and its joinable shadows the others' "
              "iterations with the last batch it trained on; give every rank at least one "
              "batch"));
    }
    round.active.push_back(values[rank] > 0);
  }
  round.synchronises = values[size] > 0;
  if (round.active_count() > 0) last_rank_ = round.authoritative_rank();
  if (options_.throw_on_early_termination && round.active_count() < size) {
    throw dist::DistError(dist::on_rank(
        group_->my_global_rank(),
        "Join: a rank of " + group_->describe() +
            " ran out of inputs (throw_on_early_termination); ranks still training: " +
            std::to_string(round.active_count()) + " of " + std::to_string(size)));
  }
  return round;
}

void Join::finish() {
  if (finished_) {
    throw dist::InvalidArgument(
        dist::on_rank(group_->my_global_rank(), "Join::finish: called twice"));
  }
  finished_ = true;
  current_join = nullptr;
  if (!options_.enable) return;
  const bool can_shadow =
      std::all_of(joinables_.begin(), joinables_.end(),
                  [](const Joinable* joinable) { return joinable->can_shadow(); });
  for (;;) {
    const JoinRound round =
        exchange(can_shadow ? Part::kJoined : Part::kCannotShadow, /*synchronises=*/false);
    if (round.active_count() == 0) break;
    ShadowScope shadowing;
    for (Joinable* joinable : joinables_) joinable->shadow_iteration(round);
  }
  // No round had a rank training: every rank stopped at once, in step.
  const int last_rank = last_rank_ >= 0 ? last_rank_ : group_->size() - 1;
  for (Joinable* joinable : joinables_) joinable->finish_join(last_rank);
}

std::optional<JoinRound> notify_join(const Joinable& joinable, bool synchronises) {
  Join* join = current_join;
  if (join == nullptr) return std::nullopt;
  const auto& joinables = join->joinables_;
  if (std::find(joinables.begin(), joinables.end(), &joinable) == joinables.end()) {
    return std::nullopt;
  }
  // One exchange per iteration, by the first joinable, as the joined ranks
  // make one per round; the others read its round.
  if (&joinable == joinables.front()) {
    join->last_round_ = join->exchange(Join::Part::kActive, synchronises);
  }
  return join->last_round_;
}

bool shadowing() { return shadowing_now; }

ShadowScope::ShadowScope() : previous_(shadowing_now) { shadowing_now = true; }

ShadowScope::~ShadowScope() { shadowing_now = previous_; }

}  // namespace engine::model
