#pragma once

#include <memory>

#include "engine/dist/group.h"
#include "engine/flight/recorder.h"

namespace engine::dist {

// The distributed state of one rank: its default group and, once
// init_local_group ran, its node-local group.
//
// A real process has one context for the whole process (init_process_group).
// The simulator runs several ranks in one process, so each rank thread binds
// its own context (ScopedThreadContext), which takes precedence over the
// process one on that thread. Nothing here is shared between two thread-ranks.
//
// Both wrap `world` twice: in node-shared buffers' all_reduce
// (shm::with_node_shared_buffers), and around that in the flight recorder, so
// that the recorder sees every call the API makes.
struct Context {
  GroupPtr default_group;
  GroupPtr local_group;
  // Records every call on the groups above (nullptr when
  // DIST_ENGINE_FLIGHT_SIZE=0).
  std::shared_ptr<flight::Recorder> flight_recorder;
};

// Makes `world` (a backend spanning all ranks) the default group of the
// whole process. Throws InvalidArgument if a process context already exists.
void init_process_group(std::shared_ptr<Backend> world);
// Forgets the process context (a no-op if there is none).
void destroy_process_group();

// Binds a context for `world` to the calling thread for the scope's lifetime.
class ScopedThreadContext {
 public:
  explicit ScopedThreadContext(std::shared_ptr<Backend> world);
  ~ScopedThreadContext();
  ScopedThreadContext(const ScopedThreadContext&) = delete;
  ScopedThreadContext& operator=(const ScopedThreadContext&) = delete;

 private:
  std::shared_ptr<Context> previous_;
};

// The calling thread's context, else the process context, else nullptr (not
// initialised).
Context* current_context();

}  // namespace engine::dist
