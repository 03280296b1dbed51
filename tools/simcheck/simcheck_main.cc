// simcheck: runs targets (the demo trainer, DDP property cases, the exact-resume
// property's training under DDPStrategy, FSDPStrategy and ZeroStrategy) on simulated worlds across
// seeds, world sizes and fault plans (swarm: the mix drawn from the seed), on virtual time. Checks,
// for each run:
//   safety:   when a rank crashed or hung, every other rank failed with an
//             error naming a stopped rank, or finished with the fault-free
//             run's exact results (a rank that shares no call with a
//             stopped one after the fault may rightly finish);
//   liveness: when no rank stopped (no faults, delays only, or faults past
//             the end), the run completed with the fault-free run's exact
//             results on every rank; when one did, the run restarted without
//             faults (the demo: from its latest checkpoint) completes with
//             them;
//   replay:   the faulted run, run again, has the same event trace
//             (deterministic scheduling: the seed fixes the interleaving);
//   no hang:  a watchdog ends simcheck if a run outlives a wall-clock bound.
// Prints a table and, for each failure, the command that replays it.
#include <ATen/Parallel.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "engine/dist/dist.h"
#include "engine/io/file_system.h"
#include "sim/world.h"
#include "tools/simcheck/targets.h"

namespace {

struct Flags {
  std::vector<std::string> targets = simcheck::target_names();
  std::vector<int> world_sizes = {2, 3, 4};
  uint64_t first_seed = 1;
  uint64_t seeds = 20;
  std::optional<std::string> plan;  // fixed plan; default: swarm from the seed
  int64_t iters = 20;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "simcheck: " << problem << "\n"
            << "usage: simcheck [--targets demo,ddp,strategy,fsdp,zero] [--world-sizes 2,3,4]\n"
            << "                [--first-seed S]\n"
            << "                [--seeds N] [--plan PLAN] [--iters N]\n"
            << "PLAN: e.g. crash:2@5,delay:1@3+200ms,never:0@7 ('' for none); default: a\n"
            << "swarm plan drawn from each seed.\n";
  std::exit(2);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  return parts;
}

Flags parse(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value after " + flag);
    const std::string value = argv[i + 1];
    try {
      if (flag == "--targets") {
        flags.targets = split(value);
      } else if (flag == "--world-sizes") {
        flags.world_sizes.clear();
        for (const auto& n : split(value)) flags.world_sizes.push_back(std::stoi(n));
      } else if (flag == "--first-seed") {
        flags.first_seed = std::stoull(value);
      } else if (flag == "--seeds") {
        flags.seeds = std::stoull(value);
      } else if (flag == "--plan") {
        sim::FaultPlan::parse(value);
        flags.plan = value;
      } else if (flag == "--iters") {
        flags.iters = std::stoll(value);
      } else {
        usage("unknown flag " + flag);
      }
    } catch (const std::exception& error) {
      usage(flag + " " + value + ": " + error.what());
    }
  }
  return flags;
}

struct Job {
  std::string target;
  int world_size;
  uint64_t seed;
};

std::string replay_command(const Job& job, const sim::FaultPlan& plan, int64_t iters) {
  return "bazel run //tools/simcheck -- --targets " + job.target + " --world-sizes " +
         std::to_string(job.world_size) + " --first-seed " + std::to_string(job.seed) +
         " --seeds 1 --iters " + std::to_string(iters) + " --plan '" + plan.to_string() + "'";
}

// Ends the process if a run outlives its bound: a hang is never waited out.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds bound) : bound_(bound), thread_([this] { watch(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void arm(const std::string& replay) {
    std::lock_guard<std::mutex> lock(mutex_);
    replay_ = replay;
    deadline_ = std::chrono::steady_clock::now() + bound_;
    armed_ = true;
    cv_.notify_all();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      if (!armed_) {
        cv_.wait(lock);
      } else if (cv_.wait_until(lock, deadline_) == std::cv_status::timeout && armed_ &&
                 std::chrono::steady_clock::now() >= deadline_) {
        std::cout << "HANG: a run outlived " << bound_.count() << " s of wall time; replay:\n  "
                  << replay_ << std::endl;
        std::_Exit(3);
      }
    }
  }

  const std::chrono::seconds bound_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool armed_ = false;
  std::string replay_;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

struct Run {
  sim::World::Outcome outcome;
  std::vector<std::string> digests;
  std::vector<uint64_t> calls;
};

Run run(const Job& job, const sim::FaultPlan& plan, const Flags& flags, const std::string& dir,
        bool resume = false) {
  sim::WorldOptions options;
  options.seed = job.seed;
  options.faults = plan;
  options.deterministic = true;
  options.timeout = std::chrono::seconds(60);
  options.max_jitter = std::chrono::microseconds(20);
  const auto target =
      simcheck::make_target(job.target, job.seed, job.world_size, flags.iters, dir, resume);
  Run result{{}, std::vector<std::string>(job.world_size), std::vector<uint64_t>(job.world_size)};
  result.outcome = sim::World(job.world_size, options).run_all([&](int rank) {
    result.digests[rank] = target(rank);
    result.calls[rank] = engine::dist::flight_record().total;
  });
  return result;
}

// Whether `message` names `rank`: "rank 2", or a list as describe_ranks
// writes it after "rank(s)" or "ranks" ("1, 3-5").
bool names_rank(const std::string& message, int rank) {
  static const std::regex mention(R"(\brank(?:s|\(s\))? (\d+(?:-\d+)?(?:, \d+(?:-\d+)?)*))");
  static const std::regex span(R"((\d+)(?:-(\d+))?)");
  for (std::sregex_iterator m(message.begin(), message.end(), mention), end; m != end; ++m) {
    const std::string list = (*m)[1];
    for (std::sregex_iterator s(list.begin(), list.end(), span); s != end; ++s) {
      const int first = std::stoi((*s)[1]);
      const int last = (*s)[2].matched ? std::stoi((*s)[2]) : first;
      if (first <= rank && rank <= last) return true;
    }
  }
  return false;
}

// "" when the run is as it must be, else the failure's kind and detail.
std::pair<std::string, std::string> judge(const Run& clean, const Run& faulted) {
  std::vector<int> stopped;
  const auto& errors = faulted.outcome.errors;
  for (size_t r = 0; r < errors.size(); ++r) {
    const std::string kind = sim::error_kind(errors[r]);
    if (kind == "InjectedCrash" || kind == "InjectedHang") stopped.push_back(static_cast<int>(r));
  }
  for (size_t r = 0; r < errors.size(); ++r) {
    const std::string kind = sim::error_kind(errors[r]);
    if (kind == "InjectedCrash" || kind == "InjectedHang") continue;
    const std::string message = sim::error_message(errors[r]);
    const std::string who = "rank " + std::to_string(r) + ": ";
    if (kind == "ok") {
      if (faulted.digests[r] != clean.digests[r]) {
        return {"wrong result", who + "differs from the fault-free run"};
      }
      continue;
    }
    if (stopped.empty()) return {"unexpected error", who + message};
    bool named = false;
    for (const int s : stopped) named |= names_rank(message, s);
    if ((kind != "PeerFailure" && kind != "Timeout") || !named) {
      return {"survivor not told", who + kind + ": " + message};
    }
  }
  return {"", ""};
}

std::pair<std::string, std::string> judge_faulted(const Run& clean, const Job& job,
                                                  const sim::FaultPlan& plan, const Flags& flags,
                                                  const std::string& dir) {
  const Run faulted = run(job, plan, flags, dir + "/faulted");
  auto verdict = judge(clean, faulted);
  if (!verdict.first.empty()) return verdict;
  if (run(job, plan, flags, dir + "/replay").outcome.trace != faulted.outcome.trace) {
    return {"nondeterministic", "a second run of the seed took another schedule"};
  }
  if (faulted.outcome.root_cause) {
    // The faults stop here: restarted from its latest checkpoint, the run
    // must complete with the fault-free results.
    const Run restarted = run(job, {}, flags, dir + "/faulted", /*resume=*/true);
    const auto after = judge(clean, restarted);
    if (!after.first.empty()) return {"no recovery: " + after.first, after.second};
  }
  return verdict;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse(argc, argv);
  at::set_num_threads(1);
  const std::string work =
      std::filesystem::temp_directory_path() / ("simcheck-" + std::to_string(::getpid()));
  Watchdog watchdog(std::chrono::seconds(300));
  struct Row {
    int runs = 0, passes = 0, stopped = 0;
    std::map<std::string, int> failures;
  };
  std::map<std::string, Row> table;
  std::vector<std::string> failures;
  int n = 0;
  for (const auto& target : flags.targets) {
    for (const int world_size : flags.world_sizes) {
      for (uint64_t seed = flags.first_seed; seed < flags.first_seed + flags.seeds; ++seed) {
        const Job job{target, world_size, seed};
        Row& row = table[target + " x" + std::to_string(world_size)];
        const std::string dir = work + "/run" + std::to_string(++n);
        watchdog.arm(replay_command(job, {}, flags.iters));
        const Run clean = run(job, {}, flags, dir + "/clean");
        uint64_t max_call = 1;
        for (const auto calls : clean.calls) max_call = std::max(max_call, calls);
        const sim::FaultPlan plan =
            flags.plan ? sim::FaultPlan::parse(*flags.plan)
                       : sim::FaultPlan::swarm(seed, world_size, max_call, std::chrono::seconds(2));
        const std::string replay = replay_command(job, plan, flags.iters);
        watchdog.arm(replay);
        auto [kind, detail] = clean.outcome.root_cause
                                  ? std::make_pair(std::string("fails without faults"),
                                                   sim::error_message(clean.outcome.root_cause))
                                  : judge_faulted(clean, job, plan, flags, dir);
        watchdog.disarm();
        ++row.runs;
        if (plan.stops_a_rank()) ++row.stopped;
        if (kind.empty()) {
          ++row.passes;
        } else {
          ++row.failures[kind];
          failures.push_back(kind + " (" + detail.substr(0, detail.find('\n')) + ")\n  " + replay);
        }
      }
    }
  }
  engine::io::remove_all(work);
  // A hang never reaches the table: the watchdog prints it and ends simcheck
  // (exit 3), so a printed table has 0 hangs by construction.
  std::printf("%-12s %6s %6s %13s %9s %s\n", "target", "runs", "passes", "rank stopped", "hangs",
              "failures by kind");
  for (const auto& [name, row] : table) {
    std::string kinds;
    for (const auto& [kind, count] : row.failures)
      kinds += kind + "=" + std::to_string(count) + " ";
    std::printf("%-12s %6d %6d %13d %9d %s\n", name.c_str(), row.runs, row.passes, row.stopped, 0,
                kinds.empty() ? "-" : kinds.c_str());
  }
  for (const auto& failure : failures) std::printf("FAIL %s\n", failure.c_str());
  return failures.empty() ? 0 : 1;
}
