#include "engine/dist/context.h"

#include <mutex>
#include <numeric>
#include <utility>

#include "engine/dist/errors.h"
#include "engine/dist/recording_backend.h"
#include "engine/dist/shm/node_shared_buffers.h"

namespace engine::dist {
namespace {

std::mutex process_mutex;
std::shared_ptr<Context> process_context;
thread_local std::shared_ptr<Context> thread_context;

std::shared_ptr<Context> make_context(std::shared_ptr<Backend> world) {
  std::vector<int> ranks(world->size());
  std::iota(ranks.begin(), ranks.end(), 0);
  const int rank = world->rank();
  auto context = std::make_shared<Context>();
  world = shm::with_node_shared_buffers(std::move(world));
  const flight::RecorderOptions options = flight::recorder_options_from_env();
  if (options.capacity > 0) {
    context->flight_recorder =
        std::make_shared<flight::Recorder>(rank, world->size(), world->name(), options);
    world = with_flight_recorder(std::move(world), context->flight_recorder);
  }
  context->default_group = std::make_shared<Group>(std::move(world), std::move(ranks), rank);
  return context;
}

}  // namespace

void init_process_group(std::shared_ptr<Backend> world) {
  std::lock_guard<std::mutex> lock(process_mutex);
  if (process_context) {
    throw InvalidArgument(on_rank(world->rank(),
                                  "the process group is already initialised: call "
                                  "destroy_process_group() before initialising again"));
  }
  process_context = make_context(std::move(world));
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(process_mutex);
  process_context.reset();
}

ScopedThreadContext::ScopedThreadContext(std::shared_ptr<Backend> world)
    : previous_(std::move(thread_context)) {
  thread_context = make_context(std::move(world));
}

ScopedThreadContext::~ScopedThreadContext() { thread_context = std::move(previous_); }

Context* current_context() {
  if (thread_context) return thread_context.get();
  std::lock_guard<std::mutex> lock(process_mutex);
  return process_context.get();
}

}  // namespace engine::dist
