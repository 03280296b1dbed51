#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "engine/dist/dist.h"
#include "tools/bench/descriptor.h"

namespace bench {
namespace dist = engine::dist;
namespace {

// Values are small integers, so every sum over up to 8 ranks is exact in float.
at::Tensor pattern(int64_t count, int64_t salt) {
  return at::arange(count, at::kLong).add_(salt).remainder_(7).sub_(3).to(at::kFloat);
}

int64_t wrong(const at::Tensor& got, const at::Tensor& expected) {
  return got.ne(expected).sum().item<int64_t>();
}

int64_t floats(int64_t bytes) { return std::max<int64_t>(bytes / 4, 1); }

at::Tensor sum_of_patterns(int64_t count, int n, int64_t salt) {
  at::Tensor total = at::zeros({count});
  for (int r = 0; r < n; ++r) total.add_(pattern(count, r + salt));
  return total;
}

double all_reduce_factor(int n) { return 2.0 * (n - 1) / n; }
double gather_factor(int n) { return static_cast<double>(n - 1) / n; }
double one(int) { return 1.0; }

Descriptor all_reduce() {
  return {"all_reduce", all_reduce_factor,
          [](int rank, int, int64_t bytes) { return Buffers{pattern(floats(bytes), rank)}; },
          [](Buffers& b) { dist::all_reduce(b.input); },
          [](const Buffers& b, int, int n) {
            return wrong(b.input, sum_of_patterns(b.input.numel(), n, 0));
          }};
}

Descriptor broadcast() {
  return {"broadcast", one,
          [](int rank, int, int64_t bytes) {
            return Buffers{rank == 0 ? pattern(floats(bytes), 11) : at::zeros({floats(bytes)})};
          },
          [](Buffers& b) { dist::broadcast(b.input, 0); },
          [](const Buffers& b, int, int) { return wrong(b.input, pattern(b.input.numel(), 11)); }};
}

Descriptor reduce() {
  return {"reduce", one,
          [](int rank, int, int64_t bytes) { return Buffers{pattern(floats(bytes), rank)}; },
          [](Buffers& b) { dist::reduce(b.input, 0); },
          [](const Buffers& b, int rank, int n) {
            const int64_t count = b.input.numel();
            return wrong(b.input, rank == 0 ? sum_of_patterns(count, n, 0) : pattern(count, rank));
          }};
}

Descriptor all_gather() {
  return {"all_gather", gather_factor,
          [](int rank, int n, int64_t bytes) {
            Buffers b;
            b.input = pattern(floats(bytes / n), rank);
            b.output = at::empty({b.input.numel() * n});
            return b;
          },
          // Into one preallocated tensor, as MPI_Allgather fills its buffer.
          [](Buffers& b) { dist::all_gather_into_tensor(b.output, b.input); },
          [](const Buffers& b, int, int n) {
            int64_t total = 0;
            const auto parts = b.output.chunk(n);
            for (int r = 0; r < n; ++r) total += wrong(parts[r], pattern(b.input.numel(), r));
            return total;
          }};
}

// The list form, or (`one_tensor`) the form that reads every block from one
// input tensor, as FSDP's gradient reduction calls it.
Descriptor reduce_scatter(bool one_tensor) {
  return {one_tensor ? "reduce_scatter_tensor" : "reduce_scatter", gather_factor,
          [one_tensor](int rank, int n, int64_t bytes) {
            Buffers b;
            const int64_t count = floats(bytes / n);
            for (int k = 0; k < n; ++k) b.inputs.push_back(pattern(count, rank + 10 * k));
            if (one_tensor) b.input = at::cat(b.inputs);
            b.output = at::zeros({count});
            return b;
          },
          [one_tensor](Buffers& b) {
            if (one_tensor) {
              dist::reduce_scatter_tensor(b.output, b.input);
            } else {
              dist::reduce_scatter(b.output, b.inputs);
            }
          },
          [](const Buffers& b, int rank, int n) {
            return wrong(b.output, sum_of_patterns(b.output.numel(), n, 10 * rank));
          }};
}

Descriptor all_to_all() {
  return {"all_to_all", gather_factor,
          [](int rank, int n, int64_t bytes) {
            Buffers b;
            const int64_t count = floats(bytes / n);
            for (int k = 0; k < n; ++k) {
              b.inputs.push_back(pattern(count, rank * n + k));
              b.outputs.push_back(at::zeros({count}));
            }
            return b;
          },
          [](Buffers& b) { dist::all_to_all(b.outputs, b.inputs); },
          [](const Buffers& b, int rank, int n) {
            int64_t total = 0;
            for (int s = 0; s < n; ++s)
              total += wrong(b.outputs[s], pattern(b.outputs[s].numel(), s * n + rank));
            return total;
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
  return {move(buffers.input), move_all(buffers.inputs), move_all(buffers.outputs),
          move(buffers.output)};
}

std::vector<Descriptor> all_descriptors() {
  return {all_reduce(),          broadcast(),          reduce(),    all_gather(),
          reduce_scatter(false), reduce_scatter(true), all_to_all()};
}

}  // namespace bench
