// engine-watch: engine-launch's watchdog (--stall-timeout, watchdog.h) for
// ranks that mpirun starts. Put it in front of the program:
//   mpirun -np 4 engine-watch --stall-timeout S [--job-store HOST:PORT]
//          [--monitor-interval S] [--grace-seconds S] PROGRAM [ARGS...]
// Each engine-watch runs its one rank with DIST_ENGINE_WATCH_DIR set to a
// folder that the ranks of its node share (under $TMPDIR, named by the job's
// PMIX_NAMESPACE and the host name). The one of local rank 0 watches them
// all, as engine-launch watches its node's ranks; with --job-store, those of
// every node watch the job together through a store that global rank 0's
// hosts (mpirun_job_watch.h), and rank 0's diagnoses every rank of the job.
// On a stall the diagnosing one prints the diagnosis, keeps the flight
// records and marks its folder stalled; then every engine-watch of that node
// stops its rank (SIGTERM, SIGKILL after the grace period) and exits 124,
// and mpirun ends the job. SIGINT and SIGTERM go on to the rank. Otherwise
// it exits with the rank's status (128 + the signal that ended it) and
// removes the folder once the node's last rank has ended.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/flight/watch.h"
#include "tools/launch/mpirun_job_watch.h"
#include "tools/launch/temporary_folder.h"
#include "tools/launch/watchdog.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kStalledStatus = 124;  // timeout(1)'s, as engine-launch
constexpr const char* kStalledMark = "STALLED";

struct Options {
  double stall_timeout_seconds = 0;
  double monitor_interval_seconds = 0.1;
  double grace_seconds = 5;
  std::string job_store;  // HOST:PORT; empty: each node watches its own ranks
  std::vector<std::string> program;
};

// What Open MPI tells each rank of where it is.
struct Place {
  int rank = 0;
  int local_rank = 0;
  int local_size = 1;
  int world_size = 1;
  std::string job;
};

double seconds_from(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    const double seconds = std::stod(value, &used);
    if (used == value.size() && seconds > 0) return seconds;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(flag + " needs a number of seconds above 0, got \"" + value + "\"");
}

Options parse(const std::vector<std::string>& args) {
  Options out;
  size_t i = 0;
  for (; i < args.size() && args[i].rfind("--", 0) == 0; i += 2) {
    if (args[i] == "--") {
      ++i;
      break;
    }
    if (i + 1 >= args.size()) throw std::invalid_argument(args[i] + " needs a value");
    if (args[i] == "--job-store") {
      out.job_store = args[i + 1];
      continue;
    }
    const double seconds = seconds_from(args[i], args[i + 1]);
    if (args[i] == "--stall-timeout") {
      out.stall_timeout_seconds = seconds;
    } else if (args[i] == "--monitor-interval") {
      out.monitor_interval_seconds = seconds;
    } else if (args[i] == "--grace-seconds") {
      out.grace_seconds = seconds;
    } else {
      throw std::invalid_argument("unknown flag " + args[i]);
    }
  }
  out.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (out.stall_timeout_seconds <= 0 || out.program.empty()) {
    throw std::invalid_argument(
        "usage: engine-watch --stall-timeout S [--job-store HOST:PORT] [--monitor-interval S] "
        "[--grace-seconds S] PROGRAM [ARGS...]");
  }
  return out;
}

std::string required_environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw std::invalid_argument(std::string(name) +
                                " is not set: engine-watch runs ranks that Open MPI's mpirun "
                                "starts; under engine-launch, use its --stall-timeout");
  }
  return value;
}

Place place_from_environment() {
  return {std::stoi(required_environment("OMPI_COMM_WORLD_RANK")),
          std::stoi(required_environment("OMPI_COMM_WORLD_LOCAL_RANK")),
          std::stoi(required_environment("OMPI_COMM_WORLD_LOCAL_SIZE")),
          std::stoi(required_environment("OMPI_COMM_WORLD_SIZE")),
          required_environment("PMIX_NAMESPACE")};
}

std::string node_folder(const Place& place) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string folder =
      launch::temporary_parent() + "/engine-watch-" + place.job + "-" + std::string(host);
  fs::create_directories(folder);
  return folder;
}

// The global ranks whose progress files are in `folder`.
std::vector<int> ranks_in(const std::string& folder) {
  const std::regex name("progress_rank([0-9]+)");
  std::vector<int> ranks;
  for (const auto& item : fs::directory_iterator(folder)) {
    std::smatch match;
    const std::string file = item.path().filename().string();
    if (std::regex_match(file, match, name)) ranks.push_back(std::stoi(match[1]));
  }
  return ranks;
}

volatile sig_atomic_t child_pid = 0;

void pass_on(int signal_number) {
  if (child_pid > 0) kill(child_pid, signal_number);
}

pid_t start(const Options& options, const std::string& folder) {
  struct sigaction action {};
  action.sa_handler = pass_on;
  for (const int s : {SIGINT, SIGTERM}) sigaction(s, &action, nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setenv("DIST_ENGINE_WATCH_DIR", folder.c_str(), 1);
    std::vector<char*> argv;
    for (const auto& arg : options.program) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::perror(("engine-watch: " + options.program[0]).c_str());
    _exit(127);
  }
  child_pid = pid;
  return pid;
}

int status_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// SIGTERM, then SIGKILL once the grace period has passed.
void stop(pid_t pid, double grace_seconds) {
  kill(pid, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::duration<double>(grace_seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// This node's stall, or with `job` the job's: the text once it happened. A
// job whose store is lost is watched on this node only from then on.
std::optional<std::string> stall(launch::Watchdog& watchdog,
                                 std::optional<launch::MpirunJobWatch>& job) {
  if (!job) return watchdog.stalled();
  try {
    return job->check(watchdog);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "engine-watch: lost the job's store (%s); watching this node only\n",
                 error.what());
    job.reset();
    return std::nullopt;
  }
}

// Runs the rank to its end, or to the node's stall: its status, or 124.
int supervise(const Options& options, const Place& place, const std::string& folder,
              std::optional<launch::MpirunJobWatch>& job) {
  const pid_t pid = start(options, folder);
  const fs::path stalled_mark = fs::path(folder) / kStalledMark;
  std::optional<launch::Watchdog> watchdog;
  const auto interval = std::chrono::duration<double>(options.monitor_interval_seconds);
  for (;;) {
    int status = 0;
    const pid_t ended = waitpid(pid, &status, WNOHANG);
    if (ended == pid) return status_of(status);
    if (place.local_rank == 0 && !watchdog) {
      std::vector<int> ranks = ranks_in(folder);
      if (static_cast<int>(ranks.size()) >= place.local_size) {
        watchdog.emplace(std::move(ranks), options.stall_timeout_seconds, folder, "engine-watch");
      }
    }
    if (watchdog && stall(*watchdog, job)) std::ofstream(stalled_mark) << "stalled\n";
    if (fs::exists(stalled_mark)) {
      std::fprintf(stderr, "engine-watch: the ranks stalled; stopping rank %d\n", place.rank);
      stop(pid, options.grace_seconds);
      return kStalledStatus;
    }
    std::this_thread::sleep_for(interval);
  }
}

// The rank's progress file goes, and the folder with the node's last one,
// unless it holds a stall's records.
void tidy(const std::string& folder, int rank) {
  std::error_code ignored;
  fs::remove(engine::flight::progress_path(folder, rank), ignored);
  if (!fs::exists(fs::path(folder) / kStalledMark)) fs::remove(folder, ignored);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse(std::vector<std::string>(argv + 1, argv + argc));
    const Place place = place_from_environment();
    const std::string folder = node_folder(place);
    std::optional<launch::MpirunJobWatch> job;
    if (place.local_rank == 0 && !options.job_store.empty())
      job.emplace(options.job_store, place.rank, place.local_size, place.world_size);
    const int status = supervise(options, place, folder, job);
    tidy(folder, place.rank);
    if (job && status == 0) job->leave();
    return status;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "engine-watch: %s\n", error.what());
    return 2;
  }
}
