#include "tools/launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/launch/job_store.h"
#include "tools/launch/job_watch.h"
#include "tools/launch/temporary_folder.h"
#include "tools/launch/watchdog.h"

namespace launch {
namespace {

using Clock = std::chrono::steady_clock;

int signal_pipe[2] = {-1, -1};

void on_signal(int signal_number) {
  const int saved = errno;
  const char byte = static_cast<char>(signal_number);
  (void)!write(signal_pipe[1], &byte, 1);
  errno = saved;
}

// Once per launcher: a signal that comes between two attempts stays in the
// pipe and stops the next one.
void install_handlers() {
  if (signal_pipe[0] >= 0) return;
  if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error("engine-launch: pipe failed");
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (const int s : {SIGCHLD, SIGINT, SIGTERM}) sigaction(s, &action, nullptr);
  // Descendants that leave a rank's process group (setsid, a daemon's double
  // fork) come to the launcher when their parent ends, so that none
  // outlives the job.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

struct Rank {
  int global = 0;
  pid_t pid = -1;
  int output = -1;  // read end of its stdout+stderr, -1 once closed
  std::string partial;
  bool running = true;
};

// Starts one rank; its stdout and stderr go to one pipe.
Rank start(const Plan& plan, int local_rank) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("engine-launch: pipe failed");
  const auto env = rank_environment(plan, local_rank);
  Rank rank;
  rank.global = std::stoi(env.at("RANK"));
  rank.pid = fork();
  if (rank.pid < 0) throw std::runtime_error("engine-launch: fork failed");
  if (rank.pid == 0) {
    setpgid(0, 0);  // its own group: signals reach the processes it starts too
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    std::vector<char*> argv;
    for (const auto& arg : plan.command) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "engine-launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(rank.pid, rank.pid);  // also here, so that no signal can come before the child's own call
  close(out[1]);
  rank.output = out[0];
  return rank;
}

void relay(Rank& rank) {
  char buffer[4096];
  const ssize_t n = read(rank.output, buffer, sizeof(buffer));
  if (n <= 0) {
    if (!rank.partial.empty()) std::printf("[rank %d] %s\n", rank.global, rank.partial.c_str());
    rank.partial.clear();
    close(rank.output);
    rank.output = -1;
  } else {
    rank.partial.append(buffer, static_cast<size_t>(n));
    for (size_t end; (end = rank.partial.find('\n')) != std::string::npos;) {
      std::printf("[rank %d] %s\n", rank.global, rank.partial.substr(0, end).c_str());
      rank.partial.erase(0, end + 1);
    }
  }
  std::fflush(stdout);
}

int status_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void report_failure(int rank, int status) {
  if (!WIFSIGNALED(status)) {
    std::fprintf(stderr, "engine-launch: rank %d failed with status %d; stopping the others\n",
                 rank, WEXITSTATUS(status));
    return;
  }
  const int signal_number = WTERMSIG(status);
  const char* name = sigabbrev_np(signal_number);
  std::fprintf(
      stderr, "engine-launch: rank %d was killed by signal %d (SIG%s)%s; stopping the others\n",
      rank, signal_number, name ? name : "?",
      signal_number == SIGKILL ? " (the kernel's out-of-memory killer sends SIGKILL: see dmesg)"
                               : "");
}

void signal_all(std::vector<Rank>& ranks, int signal_number) {
  for (const auto& rank : ranks) {
    if (rank.running) kill(-rank.pid, signal_number);
  }
}

bool is_rank(const std::vector<Rank>& ranks, pid_t pid) {
  return std::any_of(ranks.begin(), ranks.end(), [pid](const Rank& r) { return r.pid == pid; });
}

// Reaps the processes the launcher adopted that have ended, and leaves the
// ranks' ends to the caller.
void reap_adopted(const std::vector<Rank>& ranks) {
  for (;;) {
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (is_rank(ranks, info.si_pid)) return;
    waitpid(info.si_pid, nullptr, 0);
  }
}

// The launcher's children, from /proc (a process's state is the field after
// its name, which may hold spaces and parentheses; its parent comes next).
std::vector<pid_t> children() {
  std::vector<pid_t> out;
  const pid_t self = getpid();
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t name_end = line.rfind(')');
    if (name_end == std::string::npos) continue;
    char state = 0;
    long parent = 0;
    if (std::sscanf(line.c_str() + name_end + 1, " %c %ld", &state, &parent) == 2 &&
        parent == self) {
      out.push_back(static_cast<pid_t>(std::stol(name)));
    }
  }
  return out;
}

// Once every rank has ended: kills and reaps what remains of each rank's
// process group, then every process the launcher adopted, again while
// killing one hands its own children to the launcher (bounded).
void stop_leftovers(const std::vector<Rank>& ranks) {
  for (const auto& rank : ranks) kill(-rank.pid, SIGKILL);
  constexpr int kMaxRounds = 64;
  for (int round = 0; round < kMaxRounds; ++round) {
    const std::vector<pid_t> adopted = children();
    if (adopted.empty()) return;
    for (const pid_t pid : adopted) kill(pid, SIGKILL);
    for (const pid_t pid : adopted) waitpid(pid, nullptr, 0);
  }
}

}  // namespace

Outcome supervise(const Plan& plan, const Checks* checks) {
  install_handlers();
  std::vector<Rank> ranks;
  for (int local = 0; local < plan.nproc_per_node; ++local) ranks.push_back(start(plan, local));

  Outcome outcome;
  bool stopping = false;
  bool killed = false;
  // The checks run every checks->interval, however often output wakes the loop.
  Clock::time_point next_check = Clock::now();
  Clock::time_point kill_at;
  auto stop_others = [&](int status) {
    if (stopping) return;
    stopping = true;
    outcome.status = status;
    signal_all(ranks, SIGTERM);
    kill_at = Clock::now() + std::chrono::seconds(plan.grace_seconds);
  };

  for (;;) {
    bool anyone_running = false;
    std::vector<pollfd> fds = {{signal_pipe[0], POLLIN, 0}};
    std::vector<Rank*> readers;
    for (auto& rank : ranks) {
      anyone_running |= rank.running;
      if (rank.output >= 0) {
        fds.push_back({rank.output, POLLIN, 0});
        readers.push_back(&rank);
      }
    }
    if (readers.empty() && !anyone_running) break;
    // Once every rank exited, take what their pipes hold and stop: a process
    // a rank left behind may keep a pipe open.
    int timeout_ms = anyone_running ? -1 : 0;
    if (stopping && anyone_running && !killed) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - Clock::now()).count();
      if (left <= 0) {
        signal_all(ranks, SIGKILL);
        killed = true;
      } else {
        timeout_ms = static_cast<int>(left);
      }
    }
    const bool checking =
        checks != nullptr && !checks->checks.empty() && !stopping && anyone_running;
    if (checking) {
      const int until_check = static_cast<int>(std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(next_check - Clock::now())
                 .count()));
      timeout_ms = timeout_ms < 0 ? until_check : std::min(timeout_ms, until_check);
    }
    const int ready = poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) break;
    if (ready == 0 && !anyone_running) break;
    if (checking && Clock::now() >= next_check) {
      next_check = Clock::now() + checks->interval;
      for (const auto& check : checks->checks) {
        const auto stop = check();
        if (!stop) continue;
        std::fprintf(stderr, "engine-launch: %s; stopping this node's ranks\n", stop->what.c_str());
        outcome.peer_failed = stop->peer;
        stop_others(stop->status);
        break;
      }
    }

    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents) relay(*readers[i - 1]);
    }
    if (fds[0].revents) {
      char signals[64];
      const ssize_t n = read(signal_pipe[0], signals, sizeof(signals));
      for (ssize_t i = 0; i < n; ++i) {
        if (signals[i] == SIGINT || signals[i] == SIGTERM) {
          signal_all(ranks, signals[i]);
          stop_others(128 + signals[i]);
          outcome.interrupted = true;
        }
      }
      for (auto& rank : ranks) {
        int status = 0;
        if (!rank.running || waitpid(rank.pid, &status, WNOHANG) != rank.pid) continue;
        rank.running = false;
        // Ranks stopped by the launcher end as it made them: only the first
        // failure is news.
        if (status_code(status) == 0 || stopping) continue;
        report_failure(rank.global, status);
        stop_others(status_code(status));
      }
      reap_adopted(ranks);
    }
  }
  stop_leftovers(ranks);
  return outcome;
}

namespace {

// Whether a job that ended with `status` after attempt plan.restart_count
// starts again; says so either way.
bool restarts(const Plan& plan, int status) {
  if (plan.restart_count == plan.max_restarts) {
    if (plan.max_restarts > 0) {
      std::fprintf(stderr, "engine-launch: the job failed with status %d after %d restart%s\n",
                   status, plan.max_restarts, plan.max_restarts == 1 ? "" : "s");
    }
    return false;
  }
  std::fprintf(stderr, "engine-launch: restarting every rank (restart %d of %d)\n",
               plan.restart_count + 1, plan.max_restarts);
  return true;
}

// What a stall ends an attempt with: timeout(1)'s status.
constexpr int kStalledStatus = 124;
// What this node's ranks are stopped with when the job's store is lost.
constexpr int kLostStoreStatus = 1;

// The checks of one attempt: the watchdog's, with --stall-timeout (over
// several nodes the job's, through `store`), and whatever else the caller
// adds.
class AttemptChecks {
 public:
  AttemptChecks(Plan& plan, WatchFolders& folders, JobStore& store)
      : checks_{
            std::chrono::milliseconds(static_cast<int64_t>(plan.monitor_interval_seconds * 1000)),
            {}} {
    if (plan.stall_timeout_seconds <= 0) return;
    plan.watch_dir = folders.attempt(plan.restart_count);
    watchdog_.emplace(plan, plan.watch_dir);
    if (plan.nnodes > 1) job_watch_.emplace(store, *watchdog_, plan);
    checks_.checks.push_back([this, &folders]() -> std::optional<Stop> {
      const auto stall = job_watch_ ? job_watch_->check() : watchdog_->stalled();
      if (!stall) return std::nullopt;
      folders.keep();
      return Stop{kStalledStatus, *stall};
    });
  }
  AttemptChecks(const AttemptChecks&) = delete;  // its watchdog's check holds `this`
  AttemptChecks& operator=(const AttemptChecks&) = delete;
  void add(std::function<std::optional<Stop>()> check) {
    checks_.checks.push_back(std::move(check));
  }
  const Checks* get() const { return &checks_; }

 private:
  Checks checks_;
  std::optional<Watchdog> watchdog_;
  std::optional<JobWatch> job_watch_;
};

std::string describe(const Failure& failure) {
  if (failure.interrupted)
    return "node " + std::to_string(failure.node) + "'s launcher was interrupted";
  if (failure.silent)
    return "node " + std::to_string(failure.node) +
           "'s launcher went silent (no heartbeat within --heartbeat-timeout)";
  return "node " + std::to_string(failure.node) +
         (failure.status == kStalledStatus
              ? "'s ranks stalled"
              : "'s ranks failed (status " + std::to_string(failure.status) + ")");
}

}  // namespace

int supervise_with_restarts(Plan plan) {
  if (plan.master_port == 0) plan.master_port = free_port();  // one node (parse_plan)
  JobStore store(plan);
  plan.store_libtorch = JobStore::libtorch_version();
  WatchFolders folders;
  // One folder for this node's ranks; engine/snapshot copies between nodes.
  const TemporaryFolder snapshots(memory_parent(), "the snapshots");
  plan.snapshot_dir = snapshots.path();
  for (;; ++plan.restart_count) {
    const int attempt = plan.restart_count;
    const std::vector<int> nodes = store.join(attempt);
    plan.attempt_nodes = static_cast<int>(nodes.size());
    plan.attempt_node_rank =
        static_cast<int>(std::find(nodes.begin(), nodes.end(), plan.node_rank) - nodes.begin());
    if (plan.attempt_nodes < plan.nnodes) {
      std::fprintf(stderr, "engine-launch: attempt %d runs on %d of %d nodes (world size %d)\n",
                   attempt, plan.attempt_nodes, plan.nnodes,
                   plan.attempt_nodes * plan.nproc_per_node);
    }
    AttemptChecks checks(plan, folders, store);
    if (plan.nnodes > 1)
      checks.add([&]() -> std::optional<Stop> {
        try {
          store.keep_alive(attempt);
          const auto failure = store.failure(attempt);
          if (!failure) return std::nullopt;
          return Stop{failure->status, describe(*failure), /*peer=*/true};
        } catch (const std::exception& error) {
          // The job's store is gone: stop this node's ranks, then fail below.
          return Stop{kLostStoreStatus, std::string("lost the job's store: ") + error.what(),
                      /*peer=*/true};
        }
      });
    const Outcome outcome = supervise(plan, checks.get());
    std::optional<Failure> failure;
    if (outcome.peer_failed) {
      failure = store.failure(attempt);
    } else if (outcome.status != 0) {
      failure =
          store.report_failure(attempt, {plan.node_rank, outcome.status, outcome.interrupted});
    } else {
      failure = store.report_success(attempt);
      if (failure) std::fprintf(stderr, "engine-launch: %s\n", describe(*failure).c_str());
    }
    if (!failure || failure->interrupted || !restarts(plan, failure->status)) {
      store.leave();
      return failure ? failure->status : 0;
    }
  }
}

}  // namespace launch
