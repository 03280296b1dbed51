#include "engine/flight/recorder.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "engine/dist/errors.h"
#include "engine/io/atomic_file.h"

namespace engine::flight {
namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

RecorderOptions recorder_options_from_env() {
  RecorderOptions options;
  if (const char* size = std::getenv("DIST_ENGINE_FLIGHT_SIZE")) {
    char* end = nullptr;
    const long long value = std::strtoll(size, &end, 10);
    if (*size == '\0' || *end != '\0' || value < 0) {
      throw dist::InvalidArgument(
          std::string("DIST_ENGINE_FLIGHT_SIZE must be a count of calls >= 0 "
                      "(0 turns the flight recorder off), got '") +
          size + "'");
    }
    options.capacity = static_cast<size_t>(value);
  }
  if (const char* dir = std::getenv("DIST_ENGINE_FLIGHT_DIR")) options.dump_dir = dir;
  if (const char* dir = std::getenv("DIST_ENGINE_WATCH_DIR")) options.watch_dir = dir;
  return options;
}

Recorder::Recorder(int rank, int world_size, std::string backend, RecorderOptions options)
    : rank_(rank),
      world_size_(world_size),
      backend_(std::move(backend)),
      options_(std::move(options)) {
  if (options_.watch_dir.empty()) return;
  watched_ = std::make_unique<Watched>(options_.watch_dir, rank_, [this] {
    try {
      dump(options_.watch_dir, "requested by the launcher's watchdog");
    } catch (const std::exception& error) {
      std::cerr << "[rank " << rank_ << "] could not write the flight record: " << error.what()
                << "\n";
    }
  });
}

// The watch's thread dumps this recorder: it stops first.
Recorder::~Recorder() { watched_.reset(); }

uint32_t Recorder::add_group(std::vector<int> global_ranks, std::string id) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.push_back(Group{std::move(global_ranks), std::move(id)});
  return static_cast<uint32_t>(groups_.size() - 1);
}

void Recorder::Slot::write(const dist::Call& call, uint64_t call_seq, uint32_t call_group,
                           int64_t start) {
  kind = call.kind;
  seq = call_seq;
  group = call_group;
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
  op = call.op ? dist::reduce_op_name(*call.op) : "";
  start_us = start;
  end_us = 0;
  state = Entry::State::kStarted;
  error.clear();
}

Entry Recorder::Slot::entry(const Group& g) const {
  Entry e;
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

uint64_t Recorder::begin(const dist::Call& call, uint64_t seq, uint32_t group) {
  const int64_t start = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = total_++;
  if (watched_) watched_->begun();
  if (options_.capacity == 0) return id;
  if (ring_.size() < options_.capacity) ring_.emplace_back();
  ring_[id % options_.capacity].write(call, seq, group, start);
  return id;
}

Recorder::Slot* Recorder::find(uint64_t id) {
  if (options_.capacity == 0 || id + options_.capacity < total_) return nullptr;
  return &ring_[id % options_.capacity];
}

void Recorder::end(uint64_t id, std::exception_ptr error) {
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
  if (slot && slot->state != Entry::State::kStarted) return;
  if (watched_) watched_->ended();
  if (!slot) return;
  slot->end_us = end;
  slot->state = error ? Entry::State::kFailed : Entry::State::kCompleted;
  slot->error = std::move(message);
}

Record Recorder::snapshot(const std::string& reason) const {
  Record record{rank_, world_size_, backend_, reason};
  std::lock_guard<std::mutex> lock(mutex_);
  record.total = total_;
  const uint64_t kept = ring_.size();
  for (uint64_t id = total_ - kept; id < total_; ++id) {
    const Slot& slot = ring_[id % options_.capacity];
    record.entries.push_back(slot.entry(groups_[slot.group]));
  }
  return record;
}

std::string Recorder::dump(const std::string& dir, const std::string& reason) const {
  const std::string path = dir + "/flight_rank" + std::to_string(rank_) + ".json";
  io::write_atomically(path, {to_json(snapshot(reason))});
  return path;
}

void Recorder::dump_after_failure(const std::string& reason) const {
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

}  // namespace engine::flight
