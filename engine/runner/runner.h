#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/default_sampler.h"
#include "engine/io/file_system.h"
#include "engine/model/tensor_dict.h"
#include "engine/snapshot/snapshots.h"
#include "engine/strategy/strategy.h"

// A small iteration-based runner after mmengine's Runner with
// IterBasedTrainLoop and ValLoop: read it in one sitting, then start a
// production trainer from it.
namespace engine::runner {

class Progress;

// An indexable dataset that builds whole batches.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // The samples at `indices` as one batch. `rng` is the rank's generator for
  // random augmentation during training, nullptr for evaluation.
  virtual model::TensorDict batch(const std::vector<int64_t>& indices,
                                  at::Generator* rng) const = 0;
};

// Computes metrics on rank 0 from every sample's prediction, in dataset
// order: the outputs of val_step split per sample (one IValue per sample: a
// dict of the per-sample tensors).
using Metric =
    std::function<std::map<std::string, double>(const std::vector<c10::IValue>& samples)>;

struct RunnerOptions {
  int64_t max_iters = 100;
  int64_t batch_size = 16;          // per rank
  int64_t val_interval = 0;         // 0: validate only at the end
  int64_t checkpoint_interval = 0;  // 0: no checkpoints
  // Every this many iterations, a snapshot of the whole training state in
  // memory (engine/snapshot/snapshots.h) where no checkpoint was written;
  // 0: none. A job restarted with resume_from "auto" then loses fewer
  // iterations than this.
  int64_t snapshot_interval = 0;
  // Whether a snapshot is written while the next iteration trains
  // (Snapshots::take_in_background, committed once that iteration ends):
  // its cost moves off the step, for a second copy of the state in memory
  // until it is written and one more iteration lost when a job is killed
  // before the commit.
  bool snapshot_overlap = false;
  // Where the snapshots go: a folder that outlives the ranks' processes,
  // one for the ranks of each node (or one for all). Absent:
  // DIST_ENGINE_SNAPSHOT_DIR, which engine-launch sets on every node;
  // without either, a snapshot_interval is a ConfigError.
  std::optional<std::string> snapshot_dir;
  // Where snapshot commit markers are written (tests crash it); null: the
  // process's file system.
  io::FileSystem* snapshot_file_system = nullptr;
  int64_t log_interval = 10;
  std::string work_dir = "work_dirs/run";
  // A checkpoint to resume from; "auto": the newest state saved for this
  // run, the latest finished iter_N.pth in work_dir (a sharded one whose
  // save was cut short is passed over) or the committed snapshot, whichever
  // is further on (none: start afresh).
  std::optional<std::string> resume_from;
  // A checkpoint whose model weights start a run that does not resume
  // (mmengine's load_from): the engine's or a torch.save file with a
  // "state_dict". Optimizer, schedules and progress start afresh.
  std::optional<std::string> load_from;
  bool quiet = false;  // no progress output (tests)
  // Under MMDistributedDataParallel, rank 0 logs DDP's logging data in a
  // line at the first log interval of the run (or at its end, if shorter);
  // with this path it also writes them there as JSON
  // (model/wrappers/ddp_logging.h).
  std::optional<std::string> ddp_logging_json;
};

struct RunResult {
  int64_t start_iter = 0;  // where this run began (after resuming)
  model::TensorDict last_log;
  std::map<std::string, double> metrics;  // of the last validation, on every rank
  std::vector<std::string> checkpoints;   // written by this run
  // Wall time in training iterations (the batch, train_step, the scheduler),
  // without validation and checkpoints: what a time per iteration divides.
  double train_seconds = 0;
  // Snapshots taken by this run, and the wall time they kept it from
  // training (with snapshot_overlap: taking them and settling them).
  int64_t snapshots = 0;
  double snapshot_seconds = 0;
};

class Runner {
 public:
  // ConfigError ("train.<key> is ...") for a count of `options` out of
  // range: max_iters and the intervals negative, batch_size below 1 or
  // beyond 32 bits.
  Runner(std::shared_ptr<strategy::BaseStrategy> strategy, std::shared_ptr<model::BaseModel> model,
         registry::Json optim_wrapper, std::optional<registry::Json> param_scheduler,
         std::shared_ptr<Dataset> train_data, std::shared_ptr<Dataset> val_data, Metric metric,
         RunnerOptions options);
  ~Runner();

  // Trains to max_iters (from the resumed iteration, if any), validating
  // and checkpointing on the way; validates at the end. A resumed run
  // continues the epoch from the samples consumed, so at another world size
  // too no sample of the epoch is taken twice or skipped.
  RunResult train();
  // Evaluates the val dataset: every rank predicts its share (as many
  // batches on every rank, the last padded, since a sharded model's forward
  // is collective), rank 0 computes the metrics over each sample once, every
  // rank returns them.
  std::map<std::string, double> val();

  strategy::BaseStrategy& strategy() { return *strategy_; }

 private:
  std::optional<std::string> resume_path() const;
  // Resumes (resume_from) or loads weights (load_from), if asked; returns
  // where training stands, its epoch_position set.
  strategy::TrainProgress resume_or_load(const data::DefaultSampler& sampler);
  std::string save(const strategy::TrainProgress& progress);
  void report_ddp_logging();

  std::shared_ptr<strategy::BaseStrategy> strategy_;
  std::shared_ptr<Dataset> train_data_, val_data_;
  Metric metric_;
  RunnerOptions options_;
  const strategy::Prepared* parts_ = nullptr;
  std::unique_ptr<Progress> progress_;
  std::optional<snapshot::Snapshots> snapshots_;
  bool ddp_logging_reported_ = false;
};

}  // namespace engine::runner
