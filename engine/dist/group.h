#pragma once

#include <memory>
#include <vector>

#include "engine/dist/backend.h"

namespace engine::dist {

// A set of global ranks and, on its members, the backend that connects them.
// new_group() hands every rank a Group; on non-members is_member() is false
// and collectives on it throw InvalidArgument.
class Group {
 public:
  // `backend` is nullptr on ranks outside `global_ranks`.
  Group(std::shared_ptr<Backend> backend, std::vector<int> global_ranks, int my_global_rank);

  bool is_member() const { return backend_ != nullptr; }
  // This rank's rank in the group, -1 on a non-member (as torch.distributed).
  int rank() const;
  int size() const { return static_cast<int>(global_ranks_.size()); }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  int my_global_rank() const { return my_global_rank_; }

  // The group rank of `global_rank`, which `call` took as `argument` (a root
  // or a peer). Throws InvalidArgument naming the three and the group if it is
  // not in the group.
  int group_rank_of(int global_rank, const char* call, const char* argument) const;
  int global_rank_of(int group_rank) const { return global_ranks_.at(group_rank); }

  // Throws InvalidArgument if this rank is not a member.
  Backend& backend() const;

  // "[0, 2, 3]".
  std::string describe() const;

 private:
  std::shared_ptr<Backend> backend_;
  std::vector<int> global_ranks_;
  int my_global_rank_;
};

using GroupPtr = std::shared_ptr<const Group>;

}  // namespace engine::dist
