#include "engine/dist/flight.h"

#include "engine/dist/context.h"
#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

flight::Recorder& current_recorder() {
  Context* context = current_context();
  if (!context) {
    throw InvalidArgument("the flight recorder needs an initialised rank: call init_dist first");
  }
  if (!context->flight_recorder) {
    throw InvalidArgument(on_rank(context->default_group->my_global_rank(),
                                  "the flight recorder is off (DIST_ENGINE_FLIGHT_SIZE=0); "
                                  "set it to how many calls to keep"));
  }
  return *context->flight_recorder;
}

}  // namespace

flight::Record flight_record(const std::string& reason) {
  return current_recorder().snapshot(reason);
}

std::string dump_flight_record(const std::string& dir, const std::string& reason) {
  return current_recorder().dump(dir, reason);
}

}  // namespace engine::dist
