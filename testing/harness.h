#pragma once

#include <ATen/core/ivalue.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "sim/world.h"

// Runs one test body on every rank: sim thread-ranks by default, or, in
// process mode, this process's rank of a job that a launcher started.
//
// Process mode (HARNESS_BACKEND=mpi or gloo, under mpirun, engine-launch or
// torchrun): the same test sources run unchanged in N processes. The first
// run_ranks call joins the job (init_dist, launcher inferred). A world of
// n <= N ranks is the job's first n ranks (a cached subgroup bound as their
// world; the others sit the case out). collect_ranks hands every process
// every rank's result, so each process checks the same data and reaches the
// same verdict, and RapidCheck, drawing from the same seed on every rank (the
// RC_PARAMS one, else the target's: third_party/system/rapidcheck_seed.cc),
// shrinks alike everywhere. An exception on one rank is
// rethrown on every rank: a CollectiveMismatch as one (holding every rank's
// error), anything else as std::runtime_error. In debug mode
// (DIST_ENGINE_DEBUG=DETAIL) a rank that returns from its body while another
// still calls collectives is a CollectiveMismatch on every rank that names
// the rank that returned, as in the simulator.
namespace harness {

// Simulator options for tests: seed from SIM_SEED (default 1), a timeout of
// SIM_TIMEOUT_MS (default 20000) and a little arrival jitter.
sim::WorldOptions test_options();
// test_options() with `seed` (for cases drawn by RapidCheck).
sim::WorldOptions test_options(uint64_t seed);

// The largest world a case may ask for: `simulated` in the simulator, the
// job's size in process mode.
int max_world_size(int simulated);

// Where the suites' tensors go: the CPU in the simulator; in process mode the
// job's communication device (the rank's GPU on nccl).
at::Device device();

// The backend the suites run on: "sim" in the simulator, else the process
// job's (HARNESS_BACKEND).
std::string backend();

// Runs `body(rank)` for every rank of a world of `world_size` (the sim
// `options` do not apply in process mode).
void run_ranks(int world_size, const std::function<void(int rank)>& body,
               const sim::WorldOptions& options = test_options());

// How a result travels between processes: the types below as IValues. Other
// result types provide to_ivalue / from_ivalue beside themselves (found by
// argument-dependent lookup); a suite whose result type has neither runs in
// the simulator only.
template <typename R>
constexpr bool kIValueNative =
    std::is_same_v<R, at::Tensor> || std::is_same_v<R, std::vector<at::Tensor>> ||
    std::is_same_v<R, int64_t> || std::is_same_v<R, double> || std::is_same_v<R, bool> ||
    std::is_same_v<R, std::string> || std::is_same_v<R, std::vector<int64_t>> ||
    std::is_same_v<R, c10::IValue> || std::is_same_v<R, std::vector<c10::IValue>>;

template <typename R, typename = std::enable_if_t<kIValueNative<R>>>
c10::IValue to_ivalue(const R& value) {
  if constexpr (std::is_same_v<R, std::vector<c10::IValue>>) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (const auto& item : value) list.push_back(item);
    return list;
  } else {
    return c10::IValue(value);
  }
}
template <typename R, typename = std::enable_if_t<kIValueNative<R>>>
void from_ivalue(const c10::IValue& value, R& out) {
  if constexpr (std::is_same_v<R, c10::IValue>) {
    out = value;
  } else if constexpr (std::is_same_v<R, std::vector<c10::IValue>>) {
    out = value.toListRef().vec();
  } else {
    out = value.to<R>();
  }
}

template <typename R, typename = void>
struct Exchangeable : std::false_type {};
template <typename R>
struct Exchangeable<
    R, std::void_t<decltype(to_ivalue(std::declval<const R&>())),
                   decltype(from_ivalue(std::declval<const c10::IValue&>(), std::declval<R&>()))>>
    : std::true_type {};

// Process mode: every rank's encoded result (None beyond `world_size`).
std::vector<c10::IValue> exchange_results(int world_size, const c10::IValue& mine);
bool process_mode();
// This process's rank in the job (process mode only).
int process_rank();

// Fills in the other ranks' results (process mode).
template <typename R>
std::vector<R> gather_everywhere(int world_size, int my_rank, std::vector<R> results) {
  const auto all =
      exchange_results(world_size, my_rank < 0 ? c10::IValue() : to_ivalue(results[my_rank]));
  for (int rank = 0; rank < world_size; ++rank) {
    if (rank != my_rank) from_ivalue(all[rank], results[rank]);
  }
  return results;
}

// Runs `body` once for the whole test, outside the ranks: directly in the
// simulator; in process mode on process 0 while the others wait for it (for
// files the ranks then share: clearing a folder, damaging a checkpoint). An
// exception is rethrown on every process.
void once_for_all_processes(const std::function<void()>& body);

// Each rank's return value, indexed by rank, on every rank.
template <typename R>
std::vector<R> collect_ranks(int world_size, const std::function<R(int rank)>& body,
                             const sim::WorldOptions& options = test_options()) {
  std::vector<R> results(world_size);
  run_ranks(
      world_size, [&](int rank) { results[rank] = body(rank); }, options);
  if (!process_mode()) return results;
  const int my_rank = process_rank() < world_size ? process_rank() : -1;
  if constexpr (!Exchangeable<R>::value) {
    throw std::logic_error(std::string("collect_ranks: this result type cannot travel between "
                                       "processes (give it to_ivalue and from_ivalue): ") +
                           typeid(R).name());
  } else {
    return gather_everywhere(world_size, my_rank, std::move(results));
  }
}

}  // namespace harness
