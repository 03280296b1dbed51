#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>

#include <algorithm>
#include <stdexcept>

#include "tools/bench/descriptor.h"

namespace bench {
namespace {

using collective_calls::Collective;

// Rank `salt`'s values: small integers that depend on the position and,
// disjointly, on the salt, so that a block from the wrong rank or place
// shows. Every sum over up to 64 ranks is exact in float.
at::Tensor pattern(int64_t count, int64_t salt) {
  return at::arange(count, at::kLong).add_(salt).remainder_(7).add_(8 * salt - 3).to(at::kFloat);
}

int64_t floats(int64_t bytes) { return std::max<int64_t>(bytes / 4, 1); }

double all_reduce_factor(int n) { return 2.0 * (n - 1) / n; }
double gather_factor(int n) { return static_cast<double>(n - 1) / n; }
double one(int) { return 1.0; }

// A benchmarked collective: its name in the benchmark's tables, the tests'
// description it runs, and whether S is split into one block per rank.
struct Benchmarked {
  const char* name;
  const char* call;
  double (*busbw_factor)(int n);
  bool block_per_rank;
};

constexpr Benchmarked kBenchmarked[] = {
    {"all_reduce", "all_reduce", all_reduce_factor, false},
    {"broadcast", "broadcast", one, false},
    {"reduce", "reduce", one, false},
    {"all_gather", "all_gather_into_tensor", gather_factor, true},
    {"reduce_scatter", "reduce_scatter", gather_factor, true},
    {"reduce_scatter_tensor", "reduce_scatter_tensor", gather_factor, true},
    {"all_to_all", "all_to_all", gather_factor, true},
};

const Collective& described(const std::string& name) {
  const auto& all = collective_calls::all_collectives();
  const auto found =
      std::find_if(all.begin(), all.end(), [&](const Collective& c) { return c.name == name; });
  if (found == all.end()) throw std::logic_error("no description of the collective " + name);
  return *found;
}

// Every rank's inputs for S = `bytes` in a world of `n`.
collective_calls::Inputs inputs(const Benchmarked& b, int n, int64_t bytes) {
  const int64_t count = floats(b.block_per_rank ? bytes / n : bytes);
  return [count, n](int rank, int k) { return pattern(count, int64_t{rank} * n + k); };
}

Descriptor descriptor(const Benchmarked& b) {
  const Collective& call = described(b.call);
  return {b.name, b.busbw_factor,
          [b, &call](int rank, int n, int64_t bytes) {
            return call.prepare(inputs(b, n, bytes), rank, n, 0);
          },
          [&call](Buffers& buffers) { call.start(buffers, 0, nullptr)->wait(); },
          [b, &call](const Buffers& buffers, int rank, int n, int64_t bytes) {
            const auto got = call.results(buffers);
            const auto expected = call.expected(inputs(b, n, bytes), rank, n, 0);
            int64_t wrong = 0;
            for (size_t i = 0; i < got.size(); ++i)
              wrong += got[i].ne(expected.at(i)).sum().item<int64_t>();
            return wrong;
          }};
}

}  // namespace

Buffers on_device(const Buffers& buffers, at::Device device) {
  auto move = [device](const at::Tensor& t) { return t.defined() ? t.to(device) : t; };
  auto move_all = [&](const std::vector<at::Tensor>& list) {
    std::vector<at::Tensor> out;
    for (const auto& t : list) out.push_back(move(t));
    return out;
  };
  return {move(buffers.tensor), move_all(buffers.inputs), move(buffers.output),
          move_all(buffers.outputs)};
}

std::vector<Descriptor> all_descriptors() {
  std::vector<Descriptor> out;
  for (const auto& b : kBenchmarked) out.push_back(descriptor(b));
  return out;
}

}  // namespace bench
