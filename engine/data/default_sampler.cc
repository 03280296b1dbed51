#include "engine/data/default_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/randperm.h>

#include <string>

#include "engine/dist/errors.h"
#include "engine/dist/helpers.h"
#include "engine/dist/info.h"

namespace engine::data {

DefaultSampler::DefaultSampler(int64_t dataset_size, SamplerOptions options,
                               const dist::GroupPtr& group)
    : dataset_size_(dataset_size),
      shuffle_(options.shuffle),
      round_up_(options.round_up),
      seed_(options.seed ? *options.seed : dist::sync_random_seed(group)),
      rank_(dist::get_rank(group)),
      world_size_(dist::get_world_size(group)) {
  if (dataset_size <= 0) {
    throw dist::InvalidArgument(dist::on_rank(
        rank_,
        "DefaultSampler needs a non-empty dataset, got size " + std::to_string(dataset_size)));
  }
  if (round_up_) {
    num_samples_ = (dataset_size + world_size_ - 1) / world_size_;
    total_size_ = num_samples_ * world_size_;
  } else {
    num_samples_ = (dataset_size - rank_ + world_size_ - 1) / world_size_;
    total_size_ = dataset_size;
  }
}

std::vector<int64_t> DefaultSampler::indices(int64_t consumed) const {
  if (consumed < 0 || consumed >= dataset_size_) {
    throw dist::InvalidArgument(
        dist::on_rank(rank_, "DefaultSampler: an epoch of " + std::to_string(dataset_size_) +
                                 " samples cannot resume after " + std::to_string(consumed) +
                                 " of them; the position must lie in [0, " +
                                 std::to_string(dataset_size_) + ")"));
  }
  at::Tensor order;
  if (shuffle_) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed_ + epoch_);
    order = at::randperm(dataset_size_, generator, at::kLong);
  } else {
    order = at::arange(dataset_size_, at::kLong);
  }
  const int64_t* sequence = order.data_ptr<int64_t>();
  const int64_t remaining = dataset_size_ - consumed;
  const int64_t end = round_up_
                          ? consumed + (remaining + world_size_ - 1) / world_size_ * world_size_
                          : dataset_size_;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>((end - consumed) / world_size_ + 1));
  // Positions past the dataset wrap around: the padding repeats the epoch's
  // first indices.
  for (int64_t position = consumed + rank_; position < end; position += world_size_) {
    mine.push_back(sequence[position % dataset_size_]);
  }
  return mine;
}

}  // namespace engine::data
