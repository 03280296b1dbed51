#include "testing/harness.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/dist/dist.h"

namespace harness {
namespace {

namespace dist = engine::dist;

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value ? std::stoull(value) : fallback;
}

const char* process_backend() { return std::getenv("HARNESS_BACKEND"); }

// The job this process belongs to, joined at first use; each smaller world
// is a subgroup of the first ranks, made once (every rank asks for the same
// sizes in the same order, as new_group needs).
class ProcessJob {
 public:
  static ProcessJob& get() {
    static ProcessJob job;
    return job;
  }
  static bool joined;  // set once the job is joined: only then is there one to leave

  int size() const { return dist::get_world_size(); }
  int rank() const { return dist::get_rank(); }

  // The backend spanning ranks [0, n) on ranks below n, else nullptr; the
  // whole job's is the process context's. Collective on a first request.
  std::shared_ptr<dist::Backend> world_of(int n) {
    if (n == size()) return nullptr;
    auto& group = prefixes_[n];
    if (!group) {
      std::vector<int> ranks(n);
      for (int r = 0; r < n; ++r) ranks[r] = r;
      group = dist::new_group(ranks);
    }
    if (!group->is_member()) return nullptr;
    // Shares the group's ownership: the backend lives as long as the cache.
    return std::shared_ptr<dist::Backend>(group, &group->backend());
  }

  void leave() {
    prefixes_.clear();
    dist::barrier();
    dist::destroy_process_group();
  }

 private:
  ProcessJob() {
    dist::InitOptions options;
    options.timeout = std::chrono::milliseconds(env_or("HARNESS_TIMEOUT_MS", 60000));
    dist::init_dist(dist::infer_launcher(dist::process_environment()), process_backend(), options);
    joined = true;
  }

  std::map<int, dist::GroupPtr> prefixes_;
};

bool ProcessJob::joined = false;

// Leaves the job after the last test, on every rank together.
class LeaveJobAtEnd : public ::testing::Environment {
 public:
  void TearDown() override {
    if (ProcessJob::joined) ProcessJob::get().leave();
  }
};

const bool registered =
    process_backend() && ::testing::AddGlobalTestEnvironment(new LeaveJobAtEnd) != nullptr;

// A body's error as it travels to the other processes: "" for none, else a
// kind letter and the message. The engine's CollectiveMismatch keeps its type
// (a test may expect it); every other error arrives as std::runtime_error.
constexpr char kMismatch = 'M';
constexpr char kOther = 'E';

std::string encode_error(const std::exception& error) {
  std::string message = error.what();
  if (message.empty()) message = "an exception without a message";
  return (dynamic_cast<const dist::CollectiveMismatch*>(&error) ? kMismatch : kOther) + message;
}

// Every rank's encoded error. In debug mode the exchange itself is checked:
// a rank that has left its body while another still calls collectives in its
// own meets a CollectiveMismatch here, and the other rank the same one in its
// body, which brings it to this exchange; they exchange again, this rank's
// error saying that it had returned.
std::vector<c10::IValue> exchange_errors(const std::string& mine) {
  try {
    return dist::all_gather_object(c10::IValue(mine));
  } catch (const dist::CollectiveMismatch& mismatch) {
    if (!mine.empty()) throw;
    return dist::all_gather_object(c10::IValue(
        kMismatch +
        ("process rank " + std::to_string(dist::get_rank()) +
         " has returned from its body while a rank still called collectives: " + mismatch.what())));
  }
}

// Every rank throws the first rank's error, if any; a mismatch as a
// CollectiveMismatch that holds every rank's error.
void rethrow_any(const std::string& mine) {
  const auto errors = exchange_errors(mine);
  std::string first, all;
  bool mismatch = false;
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    const std::string& error = errors[rank].toStringRef();
    if (error.empty()) continue;
    const std::string text = "[process rank " + std::to_string(rank) + "] " + error.substr(1);
    // Printed as well: RapidCheck reports a failing case by running it
    // again, so a failure that does not repeat would leave no trace.
    std::cerr << "harness: " << text << "\n";
    if (first.empty()) first = text;
    all += (all.empty() ? "" : "\n") + text;
    mismatch = mismatch || error[0] == kMismatch;
  }
  if (mismatch) throw dist::CollectiveMismatch(all);
  if (!first.empty()) throw std::runtime_error(first);
}

// `value` with its tensors copied to the CPU: results travel and are checked
// there, whatever device the job computes on.
c10::IValue on_cpu(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().cpu();
  if (value.isTensorList()) {
    std::vector<at::Tensor> tensors;
    for (const at::Tensor& t : value.toTensorVector()) tensors.push_back(t.cpu());
    return tensors;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& element : value.toTupleRef().elements()) elements.push_back(on_cpu(element));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (value.isList()) {
    c10::impl::GenericList list(value.toList().elementType());
    for (const auto& element : value.toListRef()) list.push_back(on_cpu(element));
    return list;
  }
  return value;
}

void run_in_process(int world_size, const std::function<void(int rank)>& body) {
  ProcessJob& job = ProcessJob::get();
  if (world_size > job.size()) {
    throw std::invalid_argument("this case needs " + std::to_string(world_size) +
                                " ranks and the job has " + std::to_string(job.size()) +
                                ": start the suite with at least that many processes");
  }
  const auto world = job.world_of(world_size);
  std::string error;
  if (job.rank() < world_size) {
    std::optional<dist::ScopedThreadContext> bound;
    if (world) bound.emplace(world);
    try {
      body(job.rank());
    } catch (const std::exception& e) {
      error = encode_error(e);
    }
  }
  rethrow_any(error);
}

}  // namespace

bool process_mode() { return registered; }

int process_rank() { return ProcessJob::get().rank(); }

sim::WorldOptions test_options(uint64_t seed) {
  sim::WorldOptions options;
  options.seed = seed;
  options.timeout = std::chrono::milliseconds(env_or("SIM_TIMEOUT_MS", 20000));
  options.max_jitter = std::chrono::microseconds(20);
  return options;
}

sim::WorldOptions test_options() { return test_options(env_or("SIM_SEED", 1)); }

int max_world_size(int simulated) { return process_mode() ? ProcessJob::get().size() : simulated; }

at::Device device() {
  if (!process_mode()) return at::kCPU;
  ProcessJob::get();  // joins the job at first use
  return dist::get_comm_device();
}

std::string backend() {
  if (!process_mode()) return "sim";
  ProcessJob::get();
  return dist::get_backend().value_or("");
}

void run_ranks(int world_size, const std::function<void(int rank)>& body,
               const sim::WorldOptions& options) {
  // Ranks share the cores: ATen must not start a thread pool of its own.
  at::set_num_threads(1);
  if (process_mode()) {
    run_in_process(world_size, body);
    return;
  }
  sim::World(world_size, options).run(body);
}

void once_for_all_processes(const std::function<void()>& body) {
  if (!process_mode()) {
    body();
    return;
  }
  std::string error;
  if (process_rank() == 0) {
    try {
      body();
    } catch (const std::exception& e) {
      error = encode_error(e);
    }
  }
  rethrow_any(error);
}

std::vector<c10::IValue> exchange_results(int world_size, const c10::IValue& mine) {
  auto all = dist::all_gather_object(on_cpu(mine));
  all.resize(world_size);
  return all;
}

}  // namespace harness
