#include "tools/launch/watchdog.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "engine/flight/diagnosis.h"
#include "engine/flight/record_files.h"

namespace launch {
namespace {

using Clock = std::chrono::steady_clock;
namespace flight = engine::flight;

// How long the ranks have to write their records once asked.
constexpr auto kDumpWait = std::chrono::seconds(10);

std::vector<int> ranks_of_node(const Plan& plan) {
  std::vector<int> ranks;
  for (int local = 0; local < plan.nproc_per_node; ++local)
    ranks.push_back(plan.attempt_node_rank * plan.nproc_per_node + local);
  return ranks;
}

}  // namespace

Watchdog::Watchdog(std::vector<int> ranks, double stall_timeout_seconds, std::string dir,
                   std::string tool)
    : ranks_(std::move(ranks)),
      stall_timeout_seconds_(stall_timeout_seconds),
      dir_(std::move(dir)),
      tool_(std::move(tool)),
      seen_(ranks_.size()),
      last_change_(Clock::now()) {}

Watchdog::Watchdog(const Plan& plan, std::string dir)
    : Watchdog(ranks_of_node(plan), plan.stall_timeout_seconds, std::move(dir), "engine-launch") {}

std::optional<std::string> Watchdog::stalled() {
  bool in_a_call = false;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const auto now = flight::read_progress(flight::progress_path(dir_, ranks_[i]));
    const bool changed = now.has_value() != seen_[i].has_value() ||
                         (now && (now->begun != seen_[i]->begun || now->ended != seen_[i]->ended));
    if (changed) last_change_ = Clock::now();
    seen_[i] = now;
    in_a_call |= now && now->in_a_call();
  }
  const auto quiet = Clock::now() - last_change_;
  if (!in_a_call || quiet < std::chrono::duration<double>(stall_timeout_seconds_)) {
    return std::nullopt;
  }
  std::fprintf(stderr,
               "%s: no rank of this node started or ended a call for %g s while one "
               "was in a call (--stall-timeout); asking them for their flight records\n",
               tool_.c_str(), stall_timeout_seconds_);
  diagnose();
  return "the ranks stalled";
}

std::string Watchdog::summary() const {
  uint64_t begun = 0;
  uint64_t ended = 0;
  int in_a_call = 0;
  for (const int rank : ranks_) {
    const auto now = flight::read_progress(flight::progress_path(dir_, rank));
    if (!now) continue;
    begun += now->begun;
    ended += now->ended;
    in_a_call += now->in_a_call() ? 1 : 0;
  }
  return std::to_string(begun) + " " + std::to_string(ended) + " " + std::to_string(in_a_call);
}

std::vector<std::string> Watchdog::request_records() {
  std::vector<std::string> expected;
  for (const int rank : ranks_) {
    if (flight::request_dump(flight::dump_request_path(dir_, rank)))
      expected.push_back(flight::record_path(dir_, rank));
  }
  const auto deadline = Clock::now() + kDumpWait;
  auto all_written = [&] {
    for (const auto& path : expected)
      if (!std::filesystem::exists(path)) return false;
    return true;
  };
  while (!all_written() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return expected;
}

std::map<int, std::string> Watchdog::records() {
  request_records();
  std::map<int, std::string> out;
  for (const int rank : ranks_) {
    std::ifstream in(flight::record_path(dir_, rank));
    if (in) out[rank] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

void Watchdog::diagnose(const std::map<int, std::string>& others) {
  request_records();
  for (const auto& [rank, text] : others) std::ofstream(flight::record_path(dir_, rank)) << text;
  try {
    std::fprintf(stderr, "%s", flight::diagnose(flight::read_flight_records({dir_})).c_str());
    std::fprintf(stderr, "%s: the flight records are in %s\n", tool_.c_str(), dir_.c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: no diagnosis: %s\n", tool_.c_str(), error.what());
  }
}

std::string WatchFolders::attempt(int attempt) {
  const std::string dir = root_.path() + "/attempt_" + std::to_string(attempt);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace launch
