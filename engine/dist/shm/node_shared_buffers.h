#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/dist/backend.h"
#include "engine/dist/shm/segment.h"

namespace engine::dist::shm {

// The memory behind engine::dist::zeros_node_shared (engine/dist/node_shared.h
// states what users may rely on), and the backend layer that reduces it.
//
// An all_reduce on such a buffer moves nothing through the backend: each rank
// reduces slices of the buffer straight from its peers' memory and stores the
// result into every peer's copy, one pass of loads and stores instead of a
// transport's copies in and out. Ranks meet through counters in the shared
// memory; a rank that waits for its peers sleeps on a futex and never spins,
// so more ranks than cores is fine. Every element's result is computed once,
// in group-rank order, so every rank gets bit-identical results.

// Collective over the ranks `collectives` reach, whose backend is `backend`
// (it must have a node_shared_wait()); this one is `rank` of
// `world_ranks.size()`, and `world_ranks` name them in messages. Returns
// `numel` (at least one) zeros of `dtype` in shared memory when every rank
// could map every other rank's segment; an undefined tensor on every rank
// otherwise.
at::Tensor zeros_in_shared_memory(int64_t numel, c10::ScalarType dtype, int rank,
                                  std::vector<int> world_ranks, const Backend& backend,
                                  const SegmentCollectives& collectives);

// Whether `t` is a whole buffer from zeros_in_shared_memory.
bool is_node_shared(const at::Tensor& t);

// `inner` (a world's backend), with every all_reduce of a whole buffer from
// zeros_in_shared_memory on its group, in an op that applies to the buffer's
// dtype, made through shared memory; every other call goes to `inner`,
// subgroups from split() alike. A rank that does not come gives a Timeout
// naming it after the wait's timeout (none given: the backend's
// node_shared_wait()).
std::shared_ptr<Backend> with_node_shared_buffers(std::shared_ptr<Backend> inner);

}  // namespace engine::dist::shm
