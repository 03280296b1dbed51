#include "engine/dist/group.h"

#include <algorithm>
#include <string>
#include <utility>

#include "engine/dist/errors.h"

namespace engine::dist {

Group::Group(std::shared_ptr<Backend> backend, std::vector<int> global_ranks, int my_global_rank)
    : backend_(std::move(backend)),
      global_ranks_(std::move(global_ranks)),
      my_global_rank_(my_global_rank) {}

int Group::rank() const { return is_member() ? backend_->rank() : -1; }

int Group::group_rank_of(int global_rank, const char* call, const char* argument) const {
  const auto it = std::find(global_ranks_.begin(), global_ranks_.end(), global_rank);
  if (it == global_ranks_.end()) {
    throw InvalidArgument(on_rank(my_global_rank_, std::string(call) + ": " + argument + " " +
                                                       std::to_string(global_rank) +
                                                       " is not in group " + describe() +
                                                       ": pass a global rank that belongs to "
                                                       "the group"));
  }
  return static_cast<int>(it - global_ranks_.begin());
}

Backend& Group::backend() const {
  if (!is_member()) {
    throw InvalidArgument(on_rank(
        my_global_rank_,
        "this rank is not a member of group " + describe() + ": only its members may use it"));
  }
  return *backend_;
}

std::string Group::describe() const {
  std::string out = "[";
  for (size_t i = 0; i < global_ranks_.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(global_ranks_[i]);
  }
  return out + "]";
}

}  // namespace engine::dist
