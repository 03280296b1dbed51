#pragma once

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/dist/group.h"

// Rank and group information, after mmengine.dist. A `group` of nullptr means
// the default group. When not initialised every function answers as for a
// single process: rank 0, world size 1, main process.
namespace engine::dist {

bool is_distributed();
GroupPtr get_default_group();  // nullptr when not initialised
// The backend's name ("sim", "mpi", ...), nullopt when not initialised.
std::optional<std::string> get_backend(const GroupPtr& group = nullptr);
int get_world_size(const GroupPtr& group = nullptr);
// Where `group`'s collectives take their tensors: the CPU for sim, mpi and
// gloo (and when not initialised), the rank's CUDA device for nccl.
at::Device get_comm_device(const GroupPtr& group = nullptr);
// The rank within `group`; -1 if this rank is not a member.
int get_rank(const GroupPtr& group = nullptr);
// The rank within `group` of the global rank `root`, which `call` took as
// `argument` ("dst", "src"). Throws InvalidArgument naming them when `root`
// is not in the group (not initialised: when it is not 0).
int root_in_group(int root, const GroupPtr& group, const char* call, const char* argument);
std::pair<int, int> get_dist_info(const GroupPtr& group = nullptr);  // (rank, world size)
bool is_main_process(const GroupPtr& group = nullptr);

// The node-local group made by init_local_group; nullptr when not initialised.
// Throws DistError if distributed but init_local_group was never called.
GroupPtr get_local_group();
int get_local_rank();
int get_local_size();

// Collective over the default group: every rank calls it with the same
// `ranks` (global ranks, any order, no duplicates). Every rank gets a Group;
// non-members get one whose is_member() is false.
GroupPtr new_group(std::vector<int> ranks);

// Creates one group per node (node n holds global ranks n*num_per_node ...
// (n+1)*num_per_node-1), on every rank and in the same order, as
// torch.distributed requires, and keeps this rank's own as its local group.
// (mmengine passes different rank lists on different nodes, which PyTorch forbids.)
void init_local_group(int node_rank, int num_per_node);

void barrier(const GroupPtr& group = nullptr);

// Wraps `f` so that it runs on global rank 0 only. Elsewhere it does nothing
// and returns std::nullopt (void functions: nothing).
template <typename F>
auto master_only(F f) {
  return [f = std::move(f)](auto&&... args) {
    using R = std::invoke_result_t<F, decltype(args)...>;
    if constexpr (std::is_void_v<R>) {
      if (is_main_process()) f(std::forward<decltype(args)>(args)...);
    } else {
      return is_main_process() ? std::optional<R>(f(std::forward<decltype(args)>(args)...))
                               : std::optional<R>();
    }
  };
}

}  // namespace engine::dist
