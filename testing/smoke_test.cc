#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "engine/dist/dist.h"
#include "testing/harness.h"

namespace dist = engine::dist;

TEST(Smoke, AllReduce) {
  auto results = harness::collect_ranks<at::Tensor>(4, [](int rank) {
    at::Tensor t = at::full({100000}, rank + 1, at::kFloat);
    dist::all_reduce(t);
    return t;
  });
  for (auto& r : results) EXPECT_TRUE(r.eq(10).all().item<bool>());
}
