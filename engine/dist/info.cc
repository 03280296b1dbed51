#include "engine/dist/info.h"

#include <algorithm>
#include <string>

#include "engine/dist/collectives.h"
#include "engine/dist/context.h"
#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

const Group* resolve(const GroupPtr& group) {
  if (group) return group.get();
  Context* context = current_context();
  return context ? context->default_group.get() : nullptr;
}

int global_rank() {
  Context* context = current_context();
  return context ? context->default_group->my_global_rank() : 0;
}

}  // namespace

bool is_distributed() { return current_context() != nullptr; }

int root_in_group(int root, const GroupPtr& group, const char* call, const char* argument) {
  if (const Group* g = resolve(group)) return g->group_rank_of(root, call, argument);
  if (root != 0) {
    throw InvalidArgument(on_rank(0, std::string(call) + ": " + argument + " " +
                                         std::to_string(root) +
                                         " does not exist: not distributed, only rank 0 does"));
  }
  return 0;
}

GroupPtr get_default_group() {
  Context* context = current_context();
  return context ? context->default_group : nullptr;
}

std::optional<std::string> get_backend(const GroupPtr& group) {
  const Group* g = resolve(group);
  if (!g) return std::nullopt;
  return g->backend().name();
}

at::Device get_comm_device(const GroupPtr& group) {
  const Group* g = resolve(group);
  return g && g->is_member() ? g->backend().comm_device() : at::Device(at::kCPU);
}

int get_world_size(const GroupPtr& group) {
  const Group* g = resolve(group);
  return g ? g->size() : 1;
}

int get_rank(const GroupPtr& group) {
  const Group* g = resolve(group);
  return g ? g->rank() : 0;
}

std::pair<int, int> get_dist_info(const GroupPtr& group) {
  return {get_rank(group), get_world_size(group)};
}

bool is_main_process(const GroupPtr& group) { return get_rank(group) == 0; }

GroupPtr get_local_group() {
  Context* context = current_context();
  if (!context) return nullptr;
  if (!context->local_group) {
    throw DistError(on_rank(global_rank(),
                            "the local process group is not created: call "
                            "init_local_group(node_rank, num_per_node) first"));
  }
  return context->local_group;
}

int get_local_rank() { return is_distributed() ? get_local_group()->rank() : 0; }

int get_local_size() { return is_distributed() ? get_local_group()->size() : 1; }

GroupPtr new_group(std::vector<int> ranks) {
  const Group* world = resolve(nullptr);
  const int me = global_rank();
  if (!world) {
    throw InvalidArgument(on_rank(me,
                                  "new_group needs an initialised process group: call "
                                  "init_process_group (or run inside a sim::World) first"));
  }
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  const bool duplicates = std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
  if (sorted.empty() || duplicates || sorted.front() < 0 || sorted.back() >= world->size()) {
    throw InvalidArgument(on_rank(me, "new_group: ranks must be distinct global ranks in [0, " +
                                          std::to_string(world->size()) + "), got " +
                                          Group(nullptr, ranks, me).describe()));
  }
  auto backend = world->backend().split(sorted);
  return std::make_shared<Group>(std::move(backend), std::move(sorted), me);
}

void init_local_group(int node_rank, int num_per_node) {
  Context* context = current_context();
  if (!context) return;
  const int world_size = context->default_group->size();
  const int me = global_rank();
  if (num_per_node <= 0 || world_size % num_per_node != 0 || node_rank < 0 ||
      node_rank >= world_size / num_per_node || me / num_per_node != node_rank) {
    throw InvalidArgument(
        on_rank(me, "init_local_group(node_rank=" + std::to_string(node_rank) +
                        ", num_per_node=" + std::to_string(num_per_node) +
                        ") does not fit world size " + std::to_string(world_size) +
                        ": the world must be whole nodes and this rank on node_rank"));
  }
  for (int node = 0; node < world_size / num_per_node; ++node) {
    std::vector<int> ranks(num_per_node);
    for (int i = 0; i < num_per_node; ++i) ranks[i] = node * num_per_node + i;
    GroupPtr group = new_group(ranks);
    if (node == node_rank) context->local_group = group;
  }
}

void barrier(const GroupPtr& group) { barrier_async(group)->wait(); }

}  // namespace engine::dist
