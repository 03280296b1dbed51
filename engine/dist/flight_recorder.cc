#include "engine/dist/flight_recorder.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>

#include "engine/dist/context.h"
#include "engine/dist/errors.h"
#include "engine/io/atomic_file.h"

namespace engine::dist {
namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Stamps the end of call `id`; a failure other than InvalidArgument (the
// caller's mistake, reported at once) also dumps the record, named by the
// error's type ("Timeout", ...).
void record_end(FlightRecorder& recorder, uint64_t id, std::exception_ptr error) {
  recorder.end(id, error);
  if (!error) return;
  const char* kind = dist_error_kind(error);
  if (!kind) kind = "failure";
  if (std::strcmp(kind, "InvalidArgument") != 0) recorder.dump_after_failure(kind);
}

// A Work whose end is stamped in the recorder when the rank sees it.
class RecordedWork : public Work {
 public:
  RecordedWork(WorkPtr inner, std::shared_ptr<FlightRecorder> recorder, uint64_t id)
      : inner_(std::move(inner)), recorder_(std::move(recorder)), id_(id) {}

  bool is_completed() override {
    const bool done = inner_->is_completed();
    if (done) finish(inner_->exception());
    return done;
  }

  void wait(std::chrono::milliseconds timeout) override {
    try {
      inner_->wait(timeout);
    } catch (...) {
      finish(std::current_exception());
      throw;
    }
    finish(nullptr);
  }

  std::exception_ptr exception() override { return inner_->exception(); }

 private:
  void finish(std::exception_ptr error) {
    if (finished_) return;
    finished_ = true;
    record_end(*recorder_, id_, error);
  }

  WorkPtr inner_;
  std::shared_ptr<FlightRecorder> recorder_;
  uint64_t id_;
  bool finished_ = false;
};

class RecordingBackend : public Backend {
 public:
  RecordingBackend(std::shared_ptr<Backend> inner, std::shared_ptr<FlightRecorder> recorder,
                   std::vector<int> global_ranks, std::string group_id)
      : inner_(std::move(inner)),
        recorder_(std::move(recorder)),
        global_ranks_(std::move(global_ranks)),
        group_id_(std::move(group_id)),
        group_(recorder_->add_group(global_ranks_, group_id_)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  at::Device comm_device() const override { return inner_->comm_device(); }
  std::optional<std::chrono::milliseconds> node_shared_wait() const override {
    return inner_->node_shared_wait();
  }

  WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) override {
    return track(collective("all_reduce", tensor, -1, op),
                 [&] { return inner_->all_reduce(tensor, op); });
  }
  WorkPtr broadcast(at::Tensor& tensor, int root) override {
    return track(collective("broadcast", tensor, root),
                 [&] { return inner_->broadcast(tensor, root); });
  }
  WorkPtr reduce(at::Tensor& tensor, int root, ReduceOp op) override {
    return track(collective("reduce", tensor, root, op),
                 [&] { return inner_->reduce(tensor, root, op); });
  }
  WorkPtr all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input) override {
    return track(collective("all_gather", input),
                 [&] { return inner_->all_gather(outputs, input); });
  }
  WorkPtr all_gather_into_tensor(at::Tensor& output, const at::Tensor& input) override {
    return track(collective("all_gather", input),
                 [&] { return inner_->all_gather_into_tensor(output, input); });
  }
  WorkPtr gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) override {
    return track(collective("gather", input, root),
                 [&] { return inner_->gather(outputs, input, root); });
  }
  WorkPtr scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) override {
    return track(collective("scatter", output, root),
                 [&] { return inner_->scatter(output, inputs, root); });
  }
  WorkPtr reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                         ReduceOp op) override {
    return track(collective("reduce_scatter", output, -1, op),
                 [&] { return inner_->reduce_scatter(output, inputs, op); });
  }
  WorkPtr reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    return track(collective("reduce_scatter", output, -1, op),
                 [&] { return inner_->reduce_scatter_tensor(output, input, op); });
  }
  WorkPtr all_to_all(std::vector<at::Tensor>& outputs,
                     const std::vector<at::Tensor>& inputs) override {
    return track(collective("all_to_all", inputs.empty() ? at::Tensor() : inputs[0]),
                 [&] { return inner_->all_to_all(outputs, inputs); });
  }
  WorkPtr barrier() override {
    return track(collective("barrier", at::Tensor()), [&] { return inner_->barrier(); });
  }
  WorkPtr send(const at::Tensor& tensor, int dst, int tag) override {
    return track(point_to_point("send", tensor, dst),
                 [&] { return inner_->send(tensor, dst, tag); });
  }
  WorkPtr recv(at::Tensor& tensor, int src, int tag) override {
    return track(point_to_point("recv", tensor, src),
                 [&] { return inner_->recv(tensor, src, tag); });
  }

  std::shared_ptr<Backend> split(const std::vector<int>& ranks) override {
    std::shared_ptr<Backend> part;
    track(collective("new_group", at::Tensor()), [&] {
      part = inner_->split(ranks);
      return completed_work();
    })->wait();
    const std::string id = group_id_ + "." + std::to_string(++splits_);
    if (!part) return nullptr;
    std::vector<int> global;
    for (const int r : ranks) global.push_back(global_rank(r));
    return std::make_shared<RecordingBackend>(std::move(part), recorder_, std::move(global), id);
  }

 private:
  int global_rank(int group_rank) const {
    return group_rank >= 0 && group_rank < size() ? global_ranks_[group_rank] : -1;
  }

  FlightCall call(const char* kind, const at::Tensor& like, uint64_t seq) const {
    return FlightCall{kind, seq, group_, &like};
  }

  FlightCall collective(const char* kind, const at::Tensor& like, int root = -1,
                        std::optional<ReduceOp> op = std::nullopt) {
    FlightCall c = call(kind, like, ++collective_seq_);
    c.root = root < 0 ? -1 : global_rank(root);
    if (op) c.op = reduce_op_name(*op);
    return c;
  }

  FlightCall point_to_point(const char* kind, const at::Tensor& like, int peer) {
    FlightCall c = call(kind, like, ++point_to_point_seq_);
    c.peer = global_rank(peer);
    return c;
  }

  template <typename Start>
  WorkPtr track(const FlightCall& call, Start start) {
    const uint64_t id = recorder_->begin(call);
    WorkPtr work;
    try {
      work = start();
    } catch (...) {
      record_end(*recorder_, id, std::current_exception());
      throw;
    }
    return std::make_shared<RecordedWork>(std::move(work), recorder_, id);
  }

  std::shared_ptr<Backend> inner_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::vector<int> global_ranks_;
  std::string group_id_;
  uint32_t group_;
  uint64_t splits_ = 0;
  uint64_t collective_seq_ = 0;
  uint64_t point_to_point_seq_ = 0;
};

FlightRecorder& current_recorder() {
  Context* context = current_context();
  if (!context) {
    throw InvalidArgument("the flight recorder needs an initialised rank: call init_dist first");
  }
  if (!context->flight_recorder) {
    throw InvalidArgument(on_rank(context->default_group->my_global_rank(),
                                  "the flight recorder is off (DIST_ENGINE_FLIGHT_SIZE=0); "
                                  "set it to how many calls to keep"));
  }
  return *context->flight_recorder;
}

}  // namespace

FlightRecorderOptions flight_recorder_options_from_env() {
  FlightRecorderOptions options;
  if (const char* size = std::getenv("DIST_ENGINE_FLIGHT_SIZE")) {
    char* end = nullptr;
    const long long value = std::strtoll(size, &end, 10);
    if (*size == '\0' || *end != '\0' || value < 0) {
      throw InvalidArgument(std::string("DIST_ENGINE_FLIGHT_SIZE must be a count of calls >= 0 "
                                        "(0 turns the flight recorder off), got '") +
                            size + "'");
    }
    options.capacity = static_cast<size_t>(value);
  }
  if (const char* dir = std::getenv("DIST_ENGINE_FLIGHT_DIR")) options.dump_dir = dir;
  return options;
}

FlightRecorder::FlightRecorder(int rank, int world_size, std::string backend,
                               FlightRecorderOptions options)
    : rank_(rank),
      world_size_(world_size),
      backend_(std::move(backend)),
      options_(std::move(options)) {}

uint32_t FlightRecorder::add_group(std::vector<int> global_ranks, std::string id) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.push_back(Group{std::move(global_ranks), std::move(id)});
  return static_cast<uint32_t>(groups_.size() - 1);
}

void FlightRecorder::Slot::write(const FlightCall& call, int64_t start) {
  kind = call.kind;
  seq = call.seq;
  group = call.group;
  const at::Tensor& like = *call.like;
  dtype = c10::ScalarType::Undefined;
  shape.clear();
  bytes = 0;
  if (like.defined()) {
    dtype = like.scalar_type();
    shape.append(like.sizes().begin(), like.sizes().end());
    bytes = static_cast<int64_t>(like.nbytes());
  }
  root = call.root;
  peer = call.peer;
  op = call.op;
  start_us = start;
  end_us = 0;
  state = FlightEntry::State::kStarted;
  error.clear();
}

FlightEntry FlightRecorder::Slot::entry(const Group& g) const {
  FlightEntry e;
  e.kind = kind;
  e.seq = seq;
  e.group = g.global_ranks;
  e.group_id = g.id;
  if (dtype != c10::ScalarType::Undefined) e.dtype = c10::toString(dtype);
  e.shape.assign(shape.begin(), shape.end());
  e.bytes = bytes;
  e.root = root;
  e.peer = peer;
  e.op = op;
  e.start_us = start_us;
  e.end_us = end_us;
  e.state = state;
  e.error = error;
  return e;
}

uint64_t FlightRecorder::begin(const FlightCall& call) {
  const int64_t start = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = total_++;
  if (options_.capacity == 0) return id;
  if (ring_.size() < options_.capacity) ring_.emplace_back();
  ring_[id % options_.capacity].write(call, start);
  return id;
}

FlightRecorder::Slot* FlightRecorder::find(uint64_t id) {
  if (options_.capacity == 0 || id + options_.capacity < total_) return nullptr;
  return &ring_[id % options_.capacity];
}

void FlightRecorder::end(uint64_t id, std::exception_ptr error) {
  std::string message;
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message = first_line(e.what());
    } catch (...) {
      message = "unknown error";
    }
  }
  const int64_t end = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  Slot* slot = find(id);
  if (!slot || slot->state != FlightEntry::State::kStarted) return;
  slot->end_us = end;
  slot->state = error ? FlightEntry::State::kFailed : FlightEntry::State::kCompleted;
  slot->error = std::move(message);
}

FlightRecord FlightRecorder::snapshot(const std::string& reason) const {
  FlightRecord record{rank_, world_size_, backend_, reason};
  std::lock_guard<std::mutex> lock(mutex_);
  record.total = total_;
  const uint64_t kept = ring_.size();
  for (uint64_t id = total_ - kept; id < total_; ++id) {
    const Slot& slot = ring_[id % options_.capacity];
    record.entries.push_back(slot.entry(groups_[slot.group]));
  }
  return record;
}

std::string FlightRecorder::dump(const std::string& dir, const std::string& reason) const {
  const std::string path = dir + "/flight_rank" + std::to_string(rank_) + ".json";
  io::write_atomically(path, {to_json(snapshot(reason))});
  return path;
}

void FlightRecorder::dump_after_failure(const std::string& reason) const {
  if (options_.dump_dir.empty()) return;
  try {
    const std::string path = dump(options_.dump_dir, reason);
    std::cerr << "[rank " << rank_ << "] flight record (" << reason << ") written to " << path
              << "; diagnose with: bazel run //tools/flight -- diagnose " << options_.dump_dir
              << "\n";
  } catch (const std::exception& error) {
    std::cerr << "[rank " << rank_ << "] could not write the flight record: " << error.what()
              << "\n";
  }
}

std::shared_ptr<Backend> with_flight_recorder(std::shared_ptr<Backend> world,
                                              std::shared_ptr<FlightRecorder> recorder) {
  std::vector<int> everyone(world->size());
  for (int r = 0; r < world->size(); ++r) everyone[r] = r;
  return std::make_shared<RecordingBackend>(std::move(world), std::move(recorder),
                                            std::move(everyone), "0");
}

FlightRecord flight_record(const std::string& reason) {
  return current_recorder().snapshot(reason);
}

std::string dump_flight_record(const std::string& dir, const std::string& reason) {
  return current_recorder().dump(dir, reason);
}

}  // namespace engine::dist
