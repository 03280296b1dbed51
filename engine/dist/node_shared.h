#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

#include "engine/dist/group.h"

namespace engine::dist {

// Buffers that every rank of a group maps, for groups whose ranks share one
// machine. An all_reduce on such a buffer moves nothing through the backend:
// each rank reduces straight from its peers' memory (engine/dist/shm/ holds
// how). This is what DDP's gradient buckets live in (the reducer allocates
// them here).
//
// A rank that waits for its peers sleeps and never spins, so more ranks than
// cores is fine, and every rank gets bit-identical results. The choice is
// made beneath the flight recorder, which so records these calls too; the
// debug mode's fingerprints and the simulator's order checks would not see
// them, so the debug mode keeps to ordinary buffers
// (Backend::node_shared_wait), and the simulator does unless its options
// allow them. A rank that does not come gives a Timeout naming it after the
// wait's timeout (none given: the backend's, as set in init_dist); a rank
// that dies is seen the same way, or ended with the job by its launcher.

// Collective over `group` (nullptr: the default group): every rank calls it
// in the same order with the same `numel` and `dtype`. Returns `numel`
// zeros in shared memory when every rank could map every other rank's buffer
// (they share a machine, and /dev/shm has room), else ordinary zeros, on
// every rank alike. DIST_ENGINE_NODE_SHARED=0 on any rank makes them
// ordinary for all. Not distributed, a group of one, no elements, or a
// backend without node_shared_wait(): ordinary zeros.
at::Tensor zeros_node_shared(int64_t numel, c10::ScalarType dtype, const GroupPtr& group = nullptr);

// Whether `t` is a whole buffer from zeros_node_shared.
bool is_node_shared(const at::Tensor& t);

}  // namespace engine::dist
