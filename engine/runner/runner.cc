#include "engine/runner/runner.h"

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <limits>
#include <regex>
#include <sstream>
#include <utility>

#include "engine/checkpoint/sharded/sharded_checkpoint.h"
#include "engine/data/default_sampler.h"
#include "engine/dist/dist.h"
#include "engine/io/atomic_file.h"
#include "engine/model/wrappers/ddp_logging.h"
#include "engine/registry/config.h"
#include "engine/runner/progress.h"

namespace engine::runner {
namespace {

// Adds the wall time `work` takes to `seconds`.
void timed(double& seconds, const std::function<void()>& work) {
  const auto started = std::chrono::steady_clock::now();
  work();
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

std::string format(const std::map<std::string, double>& values) {
  std::ostringstream out;
  out << std::setprecision(4);
  for (const auto& entry : values) out << entry.first << " " << entry.second << "  ";
  return out.str();
}

std::map<std::string, double> scalars(const model::TensorDict& log) {
  std::map<std::string, double> out;
  for (const auto& entry : log) out[entry.first] = entry.second.item<double>();
  return out;
}

// The per-sample entries of a batch's predictions.
std::vector<c10::IValue> split_samples(const model::TensorDict& outputs) {
  if (outputs.empty()) return {};
  const int64_t count = outputs.begin()->second.size(0);
  std::vector<c10::IValue> samples;
  for (int64_t i = 0; i < count; ++i) {
    c10::Dict<std::string, at::Tensor> sample;
    for (const auto& entry : outputs) sample.insert(entry.first, entry.second[i].clone());
    samples.emplace_back(sample);
  }
  return samples;
}

std::map<std::string, double> broadcast_metrics(std::map<std::string, double> metrics) {
  if (!dist::is_distributed()) return metrics;
  c10::Dict<std::string, double> packed;
  for (const auto& entry : metrics) packed.insert(entry.first, entry.second);
  std::vector<c10::IValue> message{packed};
  dist::broadcast_object_list(message, 0);
  std::map<std::string, double> out;
  for (const auto& entry : message[0].toGenericDict()) {
    out[entry.key().toStringRef()] = entry.value().toDouble();
  }
  return out;
}

// ConfigError for a count outside its range. A batch stays within 32 bits,
// so that a batch times the world size, the positions an iteration takes,
// cannot overflow.
void check_counts(const RunnerOptions& options) {
  constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
  const struct {
    const char* key;
    int64_t value, least, most;
  } counts[] = {{"max_iters", options.max_iters, 0, kUnbounded},
                {"batch_size", options.batch_size, 1, std::numeric_limits<int32_t>::max()},
                {"val_interval", options.val_interval, 0, kUnbounded},
                {"checkpoint_interval", options.checkpoint_interval, 0, kUnbounded},
                {"snapshot_interval", options.snapshot_interval, 0, kUnbounded},
                {"log_interval", options.log_interval, 0, kUnbounded}};
  for (const auto& count : counts) {
    if (count.value >= count.least && count.value <= count.most) continue;
    throw registry::ConfigError(dist::on_rank(
        dist::get_rank(), std::string("train.") + count.key + " is " + std::to_string(count.value) +
                              "; it must be from " + std::to_string(count.least) + " to " +
                              std::to_string(count.most)));
  }
}

}  // namespace

Runner::Runner(std::shared_ptr<strategy::BaseStrategy> strategy,
               std::shared_ptr<model::BaseModel> model, registry::Json optim_wrapper,
               std::optional<registry::Json> param_scheduler, std::shared_ptr<Dataset> train_data,
               std::shared_ptr<Dataset> val_data, Metric metric, RunnerOptions options)
    : strategy_(std::move(strategy)),
      train_data_(std::move(train_data)),
      val_data_(std::move(val_data)),
      metric_(std::move(metric)),
      options_(std::move(options)) {
  check_counts(options_);
  parts_ = &strategy_->prepare(std::move(model), optim_wrapper, param_scheduler);
  progress_ = std::make_unique<Progress>(options_.max_iters, options_.log_interval, options_.quiet);
  if (options_.snapshot_interval > 0) {
    const auto folder =
        options_.snapshot_dir ? options_.snapshot_dir : snapshot::folder_from_environment();
    if (!folder) {
      throw registry::ConfigError(
          dist::on_rank(dist::get_rank(),
                        "train.snapshot_interval " + std::to_string(options_.snapshot_interval) +
                            " needs a folder for the snapshots: run under engine-launch (it sets "
                            "DIST_ENGINE_SNAPSHOT_DIR) or give snapshot_dir"));
    }
    snapshots_.emplace(*folder, options_.snapshot_file_system ? *options_.snapshot_file_system
                                                              : io::posix_file_system());
  }
}

Runner::~Runner() = default;

std::optional<std::string> Runner::resume_path() const {
  if (!options_.resume_from || *options_.resume_from != "auto") return options_.resume_from;
  const std::regex name("iter_([0-9]+)\\.pth");
  std::optional<std::string> latest;
  int64_t latest_iter = -1;
  if (std::filesystem::is_directory(options_.work_dir)) {
    for (const auto& file : std::filesystem::directory_iterator(options_.work_dir)) {
      std::smatch match;
      const std::string filename = file.path().filename().string();
      if (!std::regex_match(filename, match, name) || std::stoll(match[1]) <= latest_iter) continue;
      // A sharded checkpoint whose save was cut short (a crash mid-save)
      // is passed over for the one before it.
      if (file.is_directory() &&
          !checkpoint::is_finished_sharded_checkpoint(file.path().string())) {
        progress_->note("passing over " + file.path().string() + ": its save did not finish");
        continue;
      }
      latest_iter = std::stoll(match[1]);
      latest = file.path().string();
    }
  }
  const auto note = [this](const std::string& line) { progress_->note(line); };
  if (const auto snapshot = snapshots_ ? snapshots_->newest(note) : std::nullopt;
      snapshot && snapshot->iter > latest_iter) {
    latest = snapshot->path;
  }
  return latest;
}

std::string Runner::save(const strategy::TrainProgress& progress) {
  const std::string path = (std::filesystem::path(options_.work_dir) /
                            ("iter_" + std::to_string(progress.iter) + ".pth"))
                               .string();
  strategy_->save_checkpoint(path, progress);
  progress_->note("saved checkpoint " + path);
  return path;
}

strategy::TrainProgress Runner::resume_or_load(const data::DefaultSampler& sampler) {
  strategy::TrainProgress at;
  if (const auto path = resume_path()) {
    at = strategy_->resume(*path).progress;
    if (!at.epoch_position) {
      // Saved without its place in the data: as the iteration puts it at
      // this world size, which is right where the world size is the one
      // that saved.
      const int64_t per_epoch =
          (sampler.num_samples() + options_.batch_size - 1) / options_.batch_size;
      at.epoch = at.iter / per_epoch;
      at.epoch_position = at.iter % per_epoch * options_.batch_size * sampler.world_size();
    }
    progress_->note("resumed from " + *path + " at iteration " + std::to_string(at.iter) +
                    ", epoch " + std::to_string(at.epoch) + " after " +
                    std::to_string(*at.epoch_position) + " samples");
  } else if (options_.load_from) {
    strategy_->load_checkpoint(*options_.load_from);
    progress_->note("loaded the weights of " + *options_.load_from);
  }
  at.epoch_position = at.epoch_position.value_or(0);
  return at;
}

RunResult Runner::train() {
  data::SamplerOptions sampling;
  sampling.seed = strategy_->shared_seed();
  data::DefaultSampler sampler(train_data_->size(), sampling);
  strategy::TrainProgress at = resume_or_load(sampler);
  RunResult result;
  result.start_iter = at.iter;
  auto& model = *parts_->model;
  parts_->initialize_count_status(result.start_iter, options_.max_iters);

  // Every iteration takes batch_size positions per rank of the epoch's
  // sequence; an epoch ends when the sequence is used up. Counting positions
  // rather than iterations lets a run resume at another world size.
  const int64_t per_iteration = options_.batch_size * sampler.world_size();
  std::vector<int64_t> indices;
  size_t next = 0;
  bool indices_current = false;
  model.train();
  for (; at.iter < options_.max_iters; ++at.iter) {
    if (!indices_current) {
      sampler.set_epoch(at.epoch);
      indices = sampler.indices(*at.epoch_position);
      next = 0;
      indices_current = true;
    }
    timed(result.train_seconds, [&] {
      const size_t taken =
          std::min(indices.size() - next, static_cast<size_t>(options_.batch_size));
      const auto batch = train_data_->batch(
          {indices.begin() + next, indices.begin() + next + taken}, &strategy_->generator());
      next += taken;
      result.last_log = parts_->train_step(batch);
      parts_->step_schedulers();
    });

    *at.epoch_position += per_iteration;
    if (*at.epoch_position >= sampler.dataset_size()) {
      ++at.epoch;
      at.epoch_position = 0;
      indices_current = false;
    }
    const int64_t done = at.iter + 1;
    if (snapshots_) timed(result.snapshot_seconds, [&] { snapshots_->settle(); });
    auto summary = scalars(result.last_log);
    for (const auto& [name, lr] : parts_->learning_rates()) summary[name] = lr;
    progress_->update(done, format(summary));
    if (done - result.start_iter == options_.log_interval || done == options_.max_iters) {
      report_ddp_logging();
    }
    if (options_.val_interval > 0 && done % options_.val_interval == 0 &&
        done < options_.max_iters) {
      result.metrics = val();
      model.train();
    }
    if (options_.checkpoint_interval > 0 && done % options_.checkpoint_interval == 0) {
      result.checkpoints.push_back(save({done, at.epoch, at.epoch_position}));
    } else if (snapshots_ && done % options_.snapshot_interval == 0 && done < options_.max_iters) {
      timed(result.snapshot_seconds, [&] {
        const strategy::TrainProgress progress{done, at.epoch, at.epoch_position};
        if (options_.snapshot_overlap) {
          snapshots_->take_in_background(*strategy_, progress);
        } else {
          snapshots_->take(*strategy_, progress);
        }
      });
      ++result.snapshots;
    }
  }
  result.metrics = val();
  return result;
}

void Runner::report_ddp_logging() {
  if (std::exchange(ddp_logging_reported_, true)) return;
  const auto* ddp = dynamic_cast<const model::MMDistributedDataParallel*>(parts_->model.get());
  if (ddp == nullptr) return;
  const model::DDPLoggingData data = model::ddp_logging_data(*ddp);
  progress_->note(data.summary());
  if (!options_.ddp_logging_json || dist::get_rank() != 0) return;
  const std::string text = data.to_json().dump(2) + "\n";
  io::write_atomically(*options_.ddp_logging_json, {text});
  progress_->note("wrote DDP's logging data to " + *options_.ddp_logging_json);
}

std::map<std::string, double> Runner::val() {
  auto& model = *parts_->model;
  model.eval();
  data::SamplerOptions sampling;
  sampling.shuffle = false;
  // Padded so that every rank runs as many batches: a sharded model's
  // forward is collective. collect_results drops the padding.
  sampling.seed = 0;
  const auto indices = data::DefaultSampler(val_data_->size(), sampling).indices();
  std::vector<c10::IValue> part;
  for (size_t begin = 0; begin < indices.size(); begin += options_.batch_size) {
    const size_t end = std::min(indices.size(), begin + options_.batch_size);
    const auto outputs =
        model.val_step(val_data_->batch({indices.begin() + begin, indices.begin() + end}, nullptr));
    for (auto& sample : split_samples(outputs)) part.push_back(std::move(sample));
  }
  const auto all = dist::collect_results(part, val_data_->size());
  std::map<std::string, double> metrics;
  if (all) metrics = metric_(*all);
  metrics = broadcast_metrics(std::move(metrics));
  progress_->note("val: " + format(metrics));
  return metrics;
}

}  // namespace engine::runner
