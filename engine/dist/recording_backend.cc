#include "engine/dist/recording_backend.h"

#include <ATen/core/Tensor.h>

#include <cstring>

#include "engine/dist/errors.h"
#include "engine/dist/forwarding_backend.h"

namespace engine::dist {
namespace {

// Stamps the end of call `id`; a failure other than InvalidArgument (the
// caller's mistake, reported at once) also dumps the record, named by the
// error's type ("Timeout", ...).
void record_end(flight::Recorder& recorder, uint64_t id, std::exception_ptr error) {
  recorder.end(id, error);
  if (!error) return;
  const char* kind = dist_error_kind(error);
  if (!kind) kind = "failure";
  if (std::strcmp(kind, "InvalidArgument") != 0) recorder.dump_after_failure(kind);
}

// A Work whose end is stamped in the recorder when the rank sees it.
class RecordedWork : public Work {
 public:
  RecordedWork(WorkPtr inner, std::shared_ptr<flight::Recorder> recorder, uint64_t id)
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
  std::shared_ptr<flight::Recorder> recorder_;
  uint64_t id_;
  bool finished_ = false;
};

class RecordingBackend : public ForwardingBackend {
 public:
  RecordingBackend(std::shared_ptr<Backend> inner, std::shared_ptr<flight::Recorder> recorder,
                   std::vector<int> global_ranks, std::string group_id)
      : ForwardingBackend(std::move(inner)),
        recorder_(std::move(recorder)),
        global_ranks_(std::move(global_ranks)),
        group_id_(std::move(group_id)),
        group_(recorder_->add_group(global_ranks_, group_id_)) {}

  std::shared_ptr<Backend> split(const std::vector<int>& ranks) override {
    std::shared_ptr<Backend> part;
    track(Call{"new_group", &no_tensor()}, ++collective_seq_, [&] {
      part = inner().split(ranks);
      return completed_work();
    })->wait();
    const std::string id = group_id_ + "." + std::to_string(++splits_);
    if (!part) return nullptr;
    std::vector<int> global;
    for (const int r : ranks) global.push_back(global_rank(r));
    return std::make_shared<RecordingBackend>(std::move(part), recorder_, std::move(global), id);
  }

 protected:
  WorkPtr around(const Call& call, const std::function<WorkPtr()>& start) override {
    Call global = call;  // the record names ranks globally
    global.root = global_rank(call.root);
    global.peer = global_rank(call.peer);
    return track(global, call.point_to_point() ? ++point_to_point_seq_ : ++collective_seq_, start);
  }

 private:
  int global_rank(int group_rank) const {
    return group_rank >= 0 && group_rank < size() ? global_ranks_[group_rank] : -1;
  }

  template <typename Start>
  WorkPtr track(const Call& call, uint64_t seq, Start start) {
    const uint64_t id = recorder_->begin(call, seq, group_);
    WorkPtr work;
    try {
      work = start();
    } catch (...) {
      record_end(*recorder_, id, std::current_exception());
      throw;
    }
    return std::make_shared<RecordedWork>(std::move(work), recorder_, id);
  }

  std::shared_ptr<flight::Recorder> recorder_;
  std::vector<int> global_ranks_;
  std::string group_id_;
  uint32_t group_;
  uint64_t splits_ = 0;
  uint64_t collective_seq_ = 0;
  uint64_t point_to_point_seq_ = 0;
};

}  // namespace

std::shared_ptr<Backend> with_flight_recorder(std::shared_ptr<Backend> world,
                                              std::shared_ptr<flight::Recorder> recorder) {
  std::vector<int> everyone(world->size());
  for (int r = 0; r < world->size(); ++r) everyone[r] = r;
  return std::make_shared<RecordingBackend>(std::move(world), std::move(recorder),
                                            std::move(everyone), "0");
}

}  // namespace engine::dist
