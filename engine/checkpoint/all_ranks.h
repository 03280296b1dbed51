#pragma once

#include <functional>
#include <string>

// Checkpoint writes and reads that span ranks end alike on every rank.
namespace engine::checkpoint {

// dist::failures_of_ranks, thrown as the same CheckpointError on every rank
// when any rank failed. Put around per-rank writes and reads so that no rank
// goes on to train while another stopped. Collective.
void throw_if_any_rank_failed(const std::string& failure, const std::string& what);

// The ranks where `runs` run `step`; then throw_if_any_rank_failed.
// Collective.
void where_for_all(bool runs, const std::function<void()>& step, const std::string& what);

// Rank 0 runs `write`; then throw_if_any_rank_failed. Collective.
void on_first_rank_for_all(const std::function<void()>& write, const std::string& what);

}  // namespace engine::checkpoint
