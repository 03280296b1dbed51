#pragma once

#include <string>

#include "engine/flight/record.h"

// The flight recorder (engine/flight) in the distributed API: the calling
// rank's record on demand. The backend layer that records every call is in
// recording_backend.h.
namespace engine::dist {

// The calling rank's record. InvalidArgument when the rank is not
// initialised or recording is off (DIST_ENGINE_FLIGHT_SIZE=0).
flight::Record flight_record(const std::string& reason = "on demand");
// Writes the calling rank's record to <dir>/flight_rank<R>.json; returns the path.
std::string dump_flight_record(const std::string& dir, const std::string& reason = "on demand");

}  // namespace engine::dist
