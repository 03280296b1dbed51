#pragma once

#include <memory>
#include <string>

#include "engine/dist/backend.h"
#include "engine/flight/record.h"
#include "engine/flight/recorder.h"

// The flight recorder (engine/flight) in the distributed API: the backend
// that records every call, and the calling rank's record on demand.
namespace engine::dist {

// Wraps a backend spanning all ranks so that every call it (and the groups
// split from it) makes is recorded in `recorder`.
std::shared_ptr<Backend> with_flight_recorder(std::shared_ptr<Backend> world,
                                              std::shared_ptr<flight::Recorder> recorder);

// The calling rank's record. InvalidArgument when the rank is not
// initialised or recording is off (DIST_ENGINE_FLIGHT_SIZE=0).
flight::Record flight_record(const std::string& reason = "on demand");
// Writes the calling rank's record to <dir>/flight_rank<R>.json; returns the path.
std::string dump_flight_record(const std::string& dir, const std::string& reason = "on demand");

}  // namespace engine::dist
