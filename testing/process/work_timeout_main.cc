// Every kind of Work (testing/work_kinds.h) in processes: the waiter's
// wait(timeout) gives up with a Timeout after its own timeout, far shorter
// than the backend's, naming the waiter's rank in the world; the work stays
// pending, and once the late rank makes its calls a second wait completes it
// with the right results (a wrapped work's division or write-back included).
// The waiter and the late rank are the last two ranks, a group of their own:
// on 3 ranks, group ranks 0 and 1 are world ranks 1 and 2, and rank 0 stays
// out, so a message that names a group rank instead of the world's is caught.
//   work_timeout_main BACKEND [unrecorded]   (2 or more ranks, under a launcher)
// Recorded (the default): every call goes through the flight recorder's
// work, whose entries must say the waits failed; "unrecorded" turns the
// recorder off (DIST_ENGINE_FLIGHT_SIZE=0), leaving the backends' own works.
// Nothing depends on timing: the late rank comes once the waiter's marker
// file says it has timed out on every kind.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "engine/dist/dist.h"
#include "testing/process/marker_files.h"
#include "testing/process/verdict.h"
#include "testing/work_kinds.h"

namespace {

namespace dist = engine::dist;
namespace fs = std::filesystem;

constexpr auto kWait = std::chrono::milliseconds(300);
constexpr auto kBackendTimeout = std::chrono::seconds(60);

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// True when the wait timed out as promised; says why not on stderr.
bool times_out(const std::string& name, const dist::WorkPtr& work) {
  const auto start = std::chrono::steady_clock::now();
  const int rank = dist::get_rank();
  try {
    work->wait(kWait);
  } catch (const dist::Timeout& error) {
    const std::string message = error.what();
    const bool named = work_kinds::names_only_rank(message, rank, dist::get_world_size()) &&
                       contains(message, "300 ms");
    const bool waited = std::chrono::steady_clock::now() - start >= kWait;
    if (named && waited) return true;
    std::cerr << name << ": a Timeout" << (waited ? "" : " before the wait's timeout")
              << " that does not name rank " << rank << " (and no other) and 300 ms: " << message
              << "\n";
    return false;
  }
  std::cerr << name << ": completed without the late rank\n";
  return false;
}

// The recorder saw each kind's wait fail, the node-shared all_reduce's too
// (it is chosen beneath the recorder, engine/dist/node_shared.h).
bool record_is_right(size_t kinds) {
  const auto record = dist::flight_record();
  size_t failed = 0;
  for (const auto& entry : record.entries)
    failed += entry.state == engine::flight::Entry::State::kFailed;
  const bool right = failed == kinds;
  if (!right)
    std::cerr << "flight record: " << failed << " failed of " << record.entries.size() << "\n";
  return right;
}

// Once the late rank came, a pending work completes with the right results;
// one that Gloo ended (a receive, see work_kinds::Kind) keeps its Timeout.
bool completes_late(const work_kinds::Kind& kind, const work_kinds::Waiting& waiting,
                    bool ends_on_timeout) {
  if (ends_on_timeout) {
    try {
      waiting.work->wait();
    } catch (const dist::Timeout&) {
      return true;
    }
    std::cerr << kind.name << ": Gloo ended it, yet it completed\n";
    return false;
  }
  waiting.work->wait();
  if (waiting.results_are_right()) return true;
  std::cerr << kind.name << ": wrong results once the late rank came\n";
  return false;
}

bool wait_then_complete(const std::string& backend, const std::vector<work_kinds::Kind>& kinds,
                        const std::vector<work_kinds::Call>& calls, bool recorded,
                        const fs::path& marker) {
  bool passed = true;
  std::vector<work_kinds::Waiting> waiting;
  for (size_t i = 0; i < calls.size(); ++i) {
    waiting.push_back(calls[i]());
    passed = times_out(kinds[i].name, waiting.back().work) && passed;
  }
  if (recorded) passed = record_is_right(kinds.size()) && passed;
  std::ofstream(marker) << "timed out\n";
  for (size_t i = 0; i < waiting.size(); ++i) {
    const bool ends_on_timeout = backend == "gloo" && kinds[i].point_to_point;
    passed = completes_late(kinds[i], waiting[i], ends_on_timeout) && passed;
  }
  return passed;
}

// The late rank's calls complete, but for a send on gloo: Gloo closed every
// connection of the waiter's group when its receive timed out. The send sees
// that as a PeerFailure, or completes if it wrote to the socket before the
// close arrived here; an untyped error or a hang is the failure.
bool come_late(const std::string& backend, const std::vector<work_kinds::Kind>& kinds,
               const std::vector<work_kinds::Call>& calls, const fs::path& marker) {
  if (!await_files({marker}, std::chrono::minutes(2))) {
    std::cerr << "the waiter never timed out\n";
    return false;
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    try {
      calls[i]().work->wait();
    } catch (const dist::PeerFailure&) {
      if (backend != "gloo" || !kinds[i].point_to_point) throw;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const bool recorded = argc == 2;
  if (argc < 2 || argc > 3 || (!recorded && std::string(argv[2]) != "unrecorded")) {
    std::cerr << "usage: work_timeout_main BACKEND [unrecorded]  (2 or more ranks, under a "
                 "launcher)\n";
    return 2;
  }
  if (!recorded) setenv("DIST_ENGINE_FLIGHT_SIZE", "0", 1);
  try {
    dist::InitOptions init;
    init.timeout = kBackendTimeout;
    const std::string backend = argv[1];
    dist::init_dist(backend == "mpi" ? "mpi" : "pytorch", backend, init);
    const int waiter = dist::get_world_size() - 2;
    const auto kinds = work_kinds::all_kinds();
    std::vector<work_kinds::Call> calls;
    for (const auto& kind : kinds) {
      const dist::GroupPtr pair = dist::new_group({waiter, waiter + 1});
      if (pair->is_member()) calls.push_back(kind.prepare(pair));
    }
    const fs::path marker = fs::path(std::getenv("TEST_TMPDIR")) / "waiter_timed_out";
    const int rank = dist::get_rank();
    bool passed = true;
    if (rank == waiter) passed = wait_then_complete(backend, kinds, calls, recorded, marker);
    if (rank == waiter + 1) passed = come_late(backend, kinds, calls, marker);
    return all_ranks_passed(passed) ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << "work_timeout_main: " << error.what() << "\n";
    return 1;
  }
}
