#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

// How the benchmark drives one collective (after nccl-tests' descriptors).
namespace bench {

// One rank's buffers for one size.
struct Buffers {
  at::Tensor input;                 // the in-place tensor, or the send tensor
  std::vector<at::Tensor> inputs;   // list inputs (reduce_scatter, all_to_all)
  std::vector<at::Tensor> outputs;  // list outputs (all_to_all)
  at::Tensor output;                // single output (all_gather, reduce_scatter)
};

struct Descriptor {
  std::string name;
  // nccl-tests' bus-bandwidth factor for n ranks.
  std::function<double(int n)> busbw_factor;
  // Buffers for `rank` of `n` with S = `bytes` (bytes per rank for all_reduce,
  // broadcast and reduce; the total gathered size for the others), filled
  // with exact small-integer inputs.
  std::function<Buffers(int rank, int n, int64_t bytes)> make;
  // The collective itself, through engine::dist.
  std::function<void(Buffers&)> run;
  // Elements of this rank's result that differ from the exact expectation
  // (after one run on freshly made buffers).
  std::function<int64_t(const Buffers&, int rank, int n)> count_wrong;
};

// all_reduce, broadcast, reduce, all_gather, reduce_scatter (list and one-tensor
// forms), all_to_all.
std::vector<Descriptor> all_descriptors();

// `buffers` on `device` (the same tensors where they are there already):
// descriptors make them on the CPU; nccl takes them on the rank's GPU.
Buffers on_device(const Buffers& buffers, at::Device device);

}  // namespace bench
