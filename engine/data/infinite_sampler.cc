#include "engine/data/infinite_sampler.h"

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

InfiniteSampler::InfiniteSampler(int64_t dataset_size, InfiniteSamplerOptions options,
                                 const dist::GroupPtr& group)
    : dataset_size_(dataset_size),
      shuffle_(options.shuffle),
      seed_(options.seed ? *options.seed : dist::sync_random_seed(group)),
      rank_(dist::get_rank(group)),
      world_size_(dist::get_world_size(group)),
      generator_(at::make_generator<at::CPUGeneratorImpl>(seed_)),
      position_(rank_) {
  if (dataset_size <= 0) {
    throw dist::InvalidArgument(dist::on_rank(
        rank_,
        "InfiniteSampler needs a non-empty dataset, got size " + std::to_string(dataset_size)));
  }
  start_next_pass();
}

void InfiniteSampler::start_next_pass() {
  const at::Tensor order = shuffle_ ? at::randperm(dataset_size_, generator_, at::kLong)
                                    : at::arange(dataset_size_, at::kLong);
  pass_.assign(order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + dataset_size_);
}

int64_t InfiniteSampler::next() {
  // With more ranks than samples a step can skip whole passes; each is still
  // drawn, so that every rank's generator stays where the others' are.
  while (position_ >= dataset_size_) {
    position_ -= dataset_size_;
    start_next_pass();
  }
  const int64_t index = pass_[position_];
  position_ += world_size_;
  return index;
}

std::vector<int64_t> InfiniteSampler::next(int64_t count) {
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (int64_t i = 0; i < count; ++i) indices.push_back(next());
  return indices;
}

}  // namespace engine::data
