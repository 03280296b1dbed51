#pragma once

#include <rapidcheck.h>

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/optim/optim_wrapper.h"
#include "testing/model/nets.h"
#include "testing/pairwise.h"

// The DDP equivalence property's cases and its two sides, shared by the
// simulator suite and the process suite (testing/process).
namespace ddp_cases {

using Snapshots = std::vector<std::map<std::string, at::Tensor>>;

struct TrainingCase {
  nets::NetSpec spec;
  int world_size = 1;
  int64_t batch = 1;
  int iterations = 1;
  int64_t accumulative_counts = 1;
  int64_t bucket_cap_bytes = 1;
  bool gradient_as_bucket_view = false;
  bool find_unused_parameters = false;
  // Every iteration uses the heads of the first (per member).
  bool static_graph = false;
  bool broadcast_buffers = true;
  // "none", or "allreduce": the default hook, which must change nothing.
  std::string comm_hook = "none";
  std::optional<engine::optim::ClipGrad> clip_grad;
  // The sorted world ranks that train, with their group as the wrapper's
  // process_group: the whole world (the default group), or in half the
  // cases any subgroup (one rank, without rank 0, not contiguous). The
  // other ranks sit the case out.
  std::vector<int> members;
  // [iteration][seat][head] and [iteration][seat], a seat being an index
  // into members.
  std::vector<std::vector<std::vector<bool>>> used_heads;
  std::vector<std::vector<std::vector<int64_t>>> head_order;  // permutations of the heads
  uint64_t seed = 0;
};

void showValue(const TrainingCase& c, std::ostream& os);

// Gradient clipping as a user may configure it: none, by norm (each norm
// type, with max_norm below and above the gradients' norm) or by value (below
// and above the gradients' magnitudes).
rc::Gen<std::optional<engine::optim::ClipGrad>> clip_grad();
// Clipping of one kind ("none", "norm" or "value"), its settings drawn.
rc::Gen<std::optional<engine::optim::ClipGrad>> clip_grad(const std::string& kind);
std::string describe(const std::optional<engine::optim::ClipGrad>& clip);
std::string describe(const std::vector<int>& members);

// Random cases; `world_size` fixes the rank count (processes), else 1-4.
rc::Gen<TrainingCase> training_case(std::optional<int> world_size = std::nullopt);

// The options every pair of whose values the grid runs at least once
// (group size up to min(max_world_size, 4), ranks outside the group or
// none, bucket size, gradient_as_bucket_view, find_unused_parameters,
// static_graph, broadcast_buffers, communication hook, clipping,
// accumulation), and every combination of group size, clipping and
// find_unused_parameters, and of static_graph and accumulation.
pairwise::Grid ddp_grid(int max_world_size);

// Cases with `row`'s values and random draws for everything else (a world
// of up to `max_world_size` ranks where the row puts ranks outside).
rc::Gen<TrainingCase> training_case(const pairwise::Grid& grid, const pairwise::Row& row,
                                    int max_world_size);

// The initial network every side starts from, the same in every process.
std::shared_ptr<nets::TestNet> initial_net(const TrainingCase& c);

// One rank under MMDistributedDataParallel; parameters and buffers after
// each step, none on a rank outside the members (every rank of the world
// calls it: it makes the group). Only the first member starts from
// `initial`; every other member starts from a scrambled state of its own
// (nets::scramble_state), which the wrapper must replace by the first's.
Snapshots train_rank(const TrainingCase& c, const nets::TestNet& initial, int rank);

// One process on the concatenated batch of all members; parameters and
// buffers.
Snapshots train_serial(const TrainingCase& c, nets::TestNet& initial);

// Tolerance: float64 throughout; DDP and the serial run differ only in the
// order in which per-sample gradient terms are summed and in dividing each
// rank's share by N before the sum: a few ulps (1e-16 relative) per step,
// over at most six SGD steps of lr 0.1 on values of order 1. 1e-9 leaves a
// millionfold margin, while any real fault (a missing average, a stale or
// misplaced bucket slot, an unsynced step) shows at 1e-3 or more.
constexpr double kTolerance = 1e-9;

// The batch of member `seat` at `iteration`: its heads and their order as
// the case says, samples of its own.
engine::model::TensorDict batch_of(const TrainingCase& c, int iteration, int seat);

// Puts `net` in the state world rank `rank`, at `seat` among the members,
// starts from: `initial`'s for the first member, for every other one a
// state scrambled from a seed of its own (by rank and case), which the
// wrapper must replace by the first's.
void set_starting_state(nets::TestNet& net, const nets::TestNet& initial, int seat,
                        uint64_t case_seed, int rank);

// Each rank's own order of running the heads, drawn at random: the rank-
// dependent control flow that makes gradients arrive in another order on
// every rank.
std::vector<std::vector<int64_t>> head_orders(int world_size, int64_t heads);

// The first parameter (by iteration) where `got` is off `expected` by more
// than `tolerance` (absolute plus relative), described; nullopt when none is.
std::optional<std::string> first_departure(const Snapshots& expected, const Snapshots& got,
                                           const std::string& who, double tolerance = kTolerance);

// `tensors` copied to the CPU: a rank's state on its device (a GPU's under
// nccl), to compare with the serial run's.
std::map<std::string, at::Tensor> on_cpu(std::map<std::string, at::Tensor> tensors);

// The first value (by iteration) where rank `rank`'s snapshots `other` are
// not bit for bit rank `first_rank`'s `first`, described; nullopt when none
// is.
std::optional<std::string> first_difference(const Snapshots& first, int first_rank,
                                            const Snapshots& other, int rank);

}  // namespace ddp_cases
