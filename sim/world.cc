#include "sim/world.h"

#include <iostream>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "engine/dist/context.h"
#include "engine/dist/errors.h"
#include "sim/sim_backend.h"
#include "sim/world_state.h"

namespace sim {

World::World(int world_size, WorldOptions options) : size_(world_size), options_(options) {
  if (world_size < 1) {
    throw engine::dist::InvalidArgument("sim::World needs at least one rank, got " +
                                        std::to_string(world_size));
  }
}

World::Outcome World::run_all(const std::function<void(int rank)>& body) {
  auto state = std::make_shared<WorldState>(size_, options_);
  if (!options_.faults.empty()) std::cerr << "sim: fault plan" << state->tag() << "\n";
  std::vector<int> everyone(size_);
  std::iota(everyone.begin(), everyone.end(), 0);
  const auto world_group = state->group("world", everyone);
  Outcome outcome;
  outcome.errors.resize(size_);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size_; ++rank) {
    threads.emplace_back([&, rank] {
      std::seed_seq seeds{options_.seed, static_cast<uint64_t>(rank)};
      auto rng = std::make_shared<std::mt19937_64>(seeds);
      try {
        state->rank_started(rank);
        engine::dist::ScopedThreadContext context(
            std::make_shared<SimBackend>(state, world_group, rank, rng));
        body(rank);
        state->rank_exited(rank);
      } catch (...) {
        outcome.errors[rank] = std::current_exception();
        state->rank_failed(rank, std::current_exception());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  outcome.root_cause = state->first_failure();
  outcome.trace = state->trace();
  return outcome;
}

std::optional<std::string> determinism_violation(int world_size, WorldOptions options,
                                                 const std::function<void(int rank)>& body) {
  options.deterministic = true;
  const auto first = World(world_size, options).run_all(body).trace;
  const auto second = World(world_size, options).run_all(body).trace;
  if (first == second) return std::nullopt;
  size_t k = 0;
  while (k < first.size() && k < second.size() && first[k] == second[k]) ++k;
  auto event = [k](const std::vector<std::string>& trace) {
    return k < trace.size() ? "\"" + trace[k] + "\"" : std::string("the end of the run");
  };
  return "two runs of sim seed " + std::to_string(options.seed) + " diverge at event #" +
         std::to_string(k + 1) + ": the first run has " + event(first) + ", the second " +
         event(second) + " (" + std::to_string(first.size()) + " and " +
         std::to_string(second.size()) +
         " events); the body depends on something the seed does "
         "not fix";
}

void World::run(const std::function<void(int rank)>& body) {
  const Outcome outcome = run_all(body);
  if (outcome.root_cause) std::rethrow_exception(outcome.root_cause);
}

const char* error_kind(const std::exception_ptr& error) {
  if (!error) return "ok";
  if (const char* kind = engine::dist::dist_error_kind(error)) return kind;
  try {
    std::rethrow_exception(error);
  } catch (const InjectedCrash&) {
    return "InjectedCrash";
  } catch (const InjectedHang&) {
    return "InjectedHang";
  } catch (...) {
    return "other";
  }
}

std::string error_message(const std::exception_ptr& error) {
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace sim
