#pragma once

#include <cstdint>

#include "engine/model/comm_hooks/comm_hook.h"

namespace engine::model {

// PyTorch's PowerSGDState, with its defaults.
struct PowerSGDOptions {
  // r: each gradient matrix (n x m, a tensor viewed as its first dimension
  // by the rest) travels as P (n x r) and Q (m x r), r = min(n, m, this).
  int64_t matrix_approximation_rank = 1;
  // Iterations (synchronised backwards) of plain averaging first; must be at
  // least 2 with error feedback or warm start (pytorch#51427), which also
  // keeps the hook's per-bucket state from the buckets before their rebuild.
  int64_t start_powerSGD_iter = 1000;
  // A matrix is compressed only when n * m > (n + m) * r * this; the others
  // are averaged uncompressed, all in one all_reduce per bucket.
  double min_compression_rate = 2;
  // Adds the last step's compression error to the next gradients.
  bool use_error_feedback = true;
  // Starts each step's Q from the last one's instead of a random draw.
  bool warm_start = true;
  // Added to each column's norm in the orthogonalisation (0: none).
  double orthogonalization_epsilon = 0;
  // Seeds the draws of the initial Qs: the same on every rank.
  int64_t random_seed = 0;
};

// PowerSGD (Vogels et al., 2019), as torch.distributed's powerSGD_hook: per
// bucket, M = P Q^T with P = M Q all-reduced and orthogonalised, then
// Q = M^T P all-reduced and divided by the group size. At
// r = min(n, m) the result equals plain averaging up to rounding. Its state
// (the iteration, the random generator, and per bucket the error and the
// last P and Q) is checkpointed, which PyTorch's is not (pytorch#75666).
// InvalidArgument for options out of range.
CommHookPtr powersgd_hook(const PowerSGDOptions& options);

}  // namespace engine::model
