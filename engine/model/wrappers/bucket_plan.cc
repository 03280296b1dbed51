#include "engine/model/wrappers/bucket_plan.h"

#include <algorithm>
#include <map>

namespace engine::model {
namespace {

struct OpenBucket {
  std::vector<size_t> params;
  int64_t bytes = 0;
  bool closed_one = false;  // a first bucket of this key was already closed
};

}  // namespace

std::vector<std::vector<size_t>> plan_buckets(const std::vector<BucketInput>& params,
                                              const std::vector<size_t>& order,
                                              int64_t first_cap_bytes, int64_t cap_bytes) {
  std::vector<std::vector<size_t>> buckets;
  std::map<std::string, OpenBucket> open;
  std::vector<std::string> keys_seen;
  for (size_t index : order) {
    const BucketInput& param = params.at(index);
    auto [it, inserted] = open.try_emplace(param.key);
    if (inserted) keys_seen.push_back(param.key);
    OpenBucket& bucket = it->second;
    bucket.params.push_back(index);
    bucket.bytes += param.bytes;
    const int64_t limit = bucket.closed_one ? cap_bytes : first_cap_bytes;
    if (bucket.bytes >= limit) {
      buckets.push_back(std::move(bucket.params));
      bucket = OpenBucket{{}, 0, true};
    }
  }
  for (const std::string& key : keys_seen) {
    if (!open[key].params.empty()) buckets.push_back(std::move(open[key].params));
  }
  std::vector<size_t> position(params.size());
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::stable_sort(buckets.begin(), buckets.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });
  return buckets;
}

std::vector<size_t> reverse_order(size_t count) {
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; ++i) order[i] = count - 1 - i;
  return order;
}

}  // namespace engine::model
