#pragma once

#include <memory>

#include "engine/dist/backend.h"
#include "engine/flight/recorder.h"

namespace engine::dist {

// Wraps a backend spanning all ranks so that every call it (and the groups
// split from it) makes is recorded in `recorder`.
std::shared_ptr<Backend> with_flight_recorder(std::shared_ptr<Backend> world,
                                              std::shared_ptr<flight::Recorder> recorder);

}  // namespace engine::dist
