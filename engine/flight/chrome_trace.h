#pragma once

#include <string>
#include <vector>

#include "engine/flight/record.h"

namespace engine::flight {

// The calls of all ranks as Chrome trace JSON (opens in Perfetto or
// chrome://tracing): one process per rank, one slice per call, named
// "all_reduce #5", with group, shape, dtype, bytes, op, root, peer and state
// as arguments. Times are microseconds from the earliest start; a call still
// in flight ends at the latest time any record saw.
std::string chrome_trace(const std::vector<Record>& records);

}  // namespace engine::flight
