#pragma once

#include <memory>

#include "engine/dist/backend.h"

namespace engine::dist {

// Debug mode for real backends, in the spirit of TORCH_DISTRIBUTED_DEBUG=DETAIL:
// wraps `inner` so that before every collective the ranks all-gather a
// fingerprint of their call (kind, sequence number, dtype, shape, reduce op,
// root, group members) and compare them; any difference raises
// CollectiveMismatch on every rank, listing each rank's call, before data
// moves. Costs one small all_gather per call, done at the call: so a late
// rank blocks the call itself (up to the backend's timeout, then Timeout)
// rather than Work::wait. Point-to-point calls are not checked (only two
// ranks take part). Subgroups made by split() are checked too.
std::shared_ptr<Backend> with_call_checks(std::shared_ptr<Backend> inner);

}  // namespace engine::dist
