#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/dist/group.h"

namespace engine::data {

struct InfiniteSamplerOptions {
  bool shuffle = true;
  // Shared by every rank; when absent, drawn on rank 0 and broadcast
  // (sync_random_seed), so the constructor is then collective.
  std::optional<int64_t> seed;
};

// mmengine's InfiniteSampler, for iteration-based training: one endless
// sequence, the same on every rank, made of passes over the dataset (each a
// fresh permutation drawn from one generator seeded with `seed`, or
// 0..size-1 without shuffle), of which rank r takes positions r, r+ws,
// r+2ws, ... There are no epochs, hence no set_epoch (mmengine's is a no-op).
class InfiniteSampler {
 public:
  InfiniteSampler(int64_t dataset_size, InfiniteSamplerOptions options = {},
                  const dist::GroupPtr& group = nullptr);

  // This rank's next index, and its next `count` indices.
  int64_t next();
  std::vector<int64_t> next(int64_t count);

  int64_t size() const { return dataset_size_; }  // the dataset's, as mmengine's len()
  int64_t seed() const { return seed_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  void start_next_pass();

  int64_t dataset_size_;
  bool shuffle_;
  int64_t seed_;
  int rank_;
  int world_size_;
  at::Generator generator_;
  std::vector<int64_t> pass_;  // the current pass over the dataset
  int64_t position_;           // this rank's next position in pass_ (may run past it)
};

}  // namespace engine::data
