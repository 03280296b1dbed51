#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "testing/collective_calls.h"

// How the benchmark drives one collective (after nccl-tests' descriptors):
// the tests' description of the call (testing/collective_calls.h), sized in
// bytes, run on the whole world with root 0, and checked exactly.
namespace bench {

// One rank's buffers for one size, as the tests' description names them.
using Buffers = collective_calls::Buffers;

struct Descriptor {
  std::string name;
  // nccl-tests' bus-bandwidth factor for n ranks.
  std::function<double(int n)> busbw_factor;
  // Buffers for `rank` of `n` with S = `bytes` (bytes per rank for all_reduce,
  // broadcast and reduce; the total gathered size for the others), filled
  // with small integers, so that every sum is exact.
  std::function<Buffers(int rank, int n, int64_t bytes)> make;
  // The collective itself, through engine::dist; returns once it completed.
  std::function<void(Buffers&)> run;
  // Elements of this rank's result that differ from the serial expectation
  // (after one run on buffers freshly made for `bytes`).
  std::function<int64_t(const Buffers&, int rank, int n, int64_t bytes)> count_wrong;
};

// all_reduce, broadcast, reduce, all_gather (into one tensor, as
// MPI_Allgather fills its buffer), reduce_scatter (list and one-tensor
// forms, the latter as FSDP's gradient reduction calls it), all_to_all.
std::vector<Descriptor> all_descriptors();

// `buffers` on `device` (the same tensors where they are there already):
// descriptors make them on the CPU; nccl takes them on the rank's GPU.
Buffers on_device(const Buffers& buffers, at::Device device);

}  // namespace bench
