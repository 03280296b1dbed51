#include "engine/model/wrappers/bucket_plan.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

namespace engine::model {
namespace {

std::vector<BucketInput> random_params() {
  const auto count = *rc::gen::inRange<size_t>(1, 40);
  std::vector<BucketInput> params;
  for (size_t i = 0; i < count; ++i) {
    params.push_back({*rc::gen::inRange<int64_t>(0, 5000),
                      *rc::gen::element<std::string>("float@cpu", "double@cpu", "half@cpu")});
  }
  return params;
}

RC_GTEST_PROP(BucketPlan, EveryParameterOnceInWalkOrderWithinOneKey, ()) {
  const auto params = random_params();
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(*rc::gen::arbitrary<uint32_t>()));
  const int64_t first_cap = *rc::gen::inRange<int64_t>(1, 8000);
  const int64_t cap = *rc::gen::inRange<int64_t>(1, 20000);
  const auto buckets = plan_buckets(params, order, first_cap, cap);

  std::vector<size_t> position(order.size());
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::vector<int> seen(params.size());
  std::map<std::string, std::vector<int64_t>> bytes_by_key;  // closed-or-last sizes, in order
  size_t previous_first = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const auto& bucket = buckets[b];
    RC_ASSERT(!bucket.empty());
    if (b > 0) RC_ASSERT(position[bucket.front()] > previous_first);
    previous_first = position[bucket.front()];
    int64_t bytes = 0;
    for (size_t i = 0; i < bucket.size(); ++i) {
      ++seen[bucket[i]];
      RC_ASSERT(params[bucket[i]].key == params[bucket.front()].key);
      if (i > 0) RC_ASSERT(position[bucket[i]] > position[bucket[i - 1]]);
      bytes += params[bucket[i]].bytes;
    }
    bytes_by_key[params[bucket.front()].key].push_back(bytes);
    // A bucket closes as soon as it reaches its limit: without its last
    // parameter it was still under it.
    const int64_t limit = bytes_by_key[params[bucket.front()].key].size() == 1 ? first_cap : cap;
    RC_ASSERT(bytes - params[bucket.back()].bytes < limit);
  }
  RC_ASSERT(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  for (const auto& [key, sizes] : bytes_by_key) {
    for (size_t i = 0; i + 1 < sizes.size(); ++i) RC_ASSERT(sizes[i] >= (i == 0 ? first_cap : cap));
  }
}

TEST(BucketPlan, ReverseOrderPutsTheLastParametersInTheFirstBucket) {
  std::vector<BucketInput> params(5, BucketInput{400, "float@cpu"});
  auto buckets = plan_buckets(params, reverse_order(5), 800, 1200);
  EXPECT_EQ(buckets, (std::vector<std::vector<size_t>>{{4, 3}, {2, 1, 0}}));
}

}  // namespace
}  // namespace engine::model
