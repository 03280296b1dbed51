#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace engine::model {

// What the bucket plan needs to know of a parameter.
struct BucketInput {
  int64_t bytes;
  std::string key;  // dtype and device: only equal keys share a bucket
};

// Assigns parameters to buckets, walking them in `order` (indices into
// `params`, each once): per key, a bucket closes once it holds at least its
// limit, the first bucket of a key `first_cap_bytes` and every later one
// `cap_bytes` (PyTorch DDP's rule). Buckets come in the order of their first
// parameter in `order`; within a bucket parameters keep `order`.
std::vector<std::vector<size_t>> plan_buckets(const std::vector<BucketInput>& params,
                                              const std::vector<size_t>& order,
                                              int64_t first_cap_bytes, int64_t cap_bytes);

// params.size()-1, ..., 1, 0: the order of a first backward (DDP's guess).
std::vector<size_t> reverse_order(size_t count);

}  // namespace engine::model
