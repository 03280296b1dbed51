#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/dist/group.h"

namespace engine::data {

struct SamplerOptions {
  bool shuffle = true;
  // Shared by every rank; when absent, drawn on rank 0 and broadcast
  // (sync_random_seed), so the constructor is then collective.
  std::optional<int64_t> seed;
  // Pad (by repeating the epoch's indices from the start) so that every rank
  // gets the same number of samples, as distributed training needs. Without
  // it rank r gets exactly r, r+ws, ... below the dataset size: the right
  // choice for evaluation, where nothing may be counted twice.
  bool round_up = true;
};

// mmengine's DefaultSampler: each epoch one permutation of the dataset
// (seeded by seed + epoch, the same on every rank, a fresh one after
// set_epoch), of which rank r takes positions r, r+ws, r+2ws, ...
// collect_results(parts, dataset_size) puts the parts back in the order of
// that sequence (dataset order when shuffle is off), dropping the padding.
class DefaultSampler {
 public:
  DefaultSampler(int64_t dataset_size, SamplerOptions options = {},
                 const dist::GroupPtr& group = nullptr);

  // This rank's indices for the rest of the current epoch, from `consumed`:
  // how many positions of the epoch's sequence every rank together has
  // taken already (0: the whole epoch). The remaining positions are dealt
  // out as an epoch is, rank r taking consumed + r, consumed + r + ws, ...,
  // so that a run resumed at another world size continues the epoch where
  // it stopped: nothing taken twice, nothing skipped (round_up's padding
  // aside). A value outside [0, dataset size) is an InvalidArgument.
  std::vector<int64_t> indices(int64_t consumed = 0) const;
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  int64_t num_samples() const { return num_samples_; }  // this rank's count per epoch
  int64_t total_size() const { return total_size_; }    // summed over ranks
  int64_t seed() const { return seed_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int64_t dataset_size() const { return dataset_size_; }

 private:
  int64_t dataset_size_;
  bool shuffle_;
  bool round_up_;
  int64_t seed_;
  int rank_;
  int world_size_;
  int64_t num_samples_;
  int64_t total_size_;
  int64_t epoch_ = 0;
};

}  // namespace engine::data
