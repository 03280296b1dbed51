#include "engine/runner/runner.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <regex>
#include <sstream>

#include "engine/data/default_sampler.h"
#include "engine/dist/dist.h"
#include "engine/runner/progress.h"

namespace engine::runner {
namespace {

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
  parts_ = &strategy_->prepare(std::move(model), optim_wrapper, param_scheduler);
  progress_ = std::make_unique<Progress>(options_.max_iters, options_.log_interval, options_.quiet);
}

Runner::~Runner() = default;

std::optional<std::string> Runner::resume_path() const {
  if (!options_.resume_from || *options_.resume_from != "auto") return options_.resume_from;
  const std::regex name("iter_([0-9]+)\\.pth");
  std::optional<std::string> latest;
  int64_t latest_iter = -1;
  if (!std::filesystem::is_directory(options_.work_dir)) return std::nullopt;
  for (const auto& file : std::filesystem::directory_iterator(options_.work_dir)) {
    std::smatch match;
    const std::string filename = file.path().filename().string();
    if (std::regex_match(filename, match, name) && std::stoll(match[1]) > latest_iter) {
      latest_iter = std::stoll(match[1]);
      latest = file.path().string();
    }
  }
  return latest;
}

std::string Runner::save(int64_t iter) {
  const std::string path =
      (std::filesystem::path(options_.work_dir) / ("iter_" + std::to_string(iter) + ".pth"))
          .string();
  strategy_->save_checkpoint(path, {iter, 0});
  progress_->note("saved checkpoint " + path);
  return path;
}

RunResult Runner::train() {
  RunResult result;
  if (const auto path = resume_path()) {
    result.start_iter = strategy_->resume(*path).progress.iter;
    progress_->note("resumed from " + *path + " at iteration " + std::to_string(result.start_iter));
  } else if (options_.load_from) {
    strategy_->load_checkpoint(*options_.load_from);
    progress_->note("loaded the weights of " + *options_.load_from);
  }
  auto& model = *parts_->model;
  auto& optim_wrapper = *parts_->optim_wrapper;
  optim_wrapper.initialize_count_status(result.start_iter, options_.max_iters);

  data::SamplerOptions sampling;
  sampling.seed = strategy_->shared_seed();
  data::DefaultSampler sampler(train_data_->size(), sampling);
  const int64_t per_epoch = (sampler.num_samples() + options_.batch_size - 1) / options_.batch_size;
  std::vector<int64_t> indices;
  int64_t indices_epoch = -1;
  model.train();
  for (int64_t iter = result.start_iter; iter < options_.max_iters; ++iter) {
    // The position in the epoch follows from the iteration alone, so a
    // resumed run draws exactly the batches the uninterrupted one would.
    const int64_t epoch = iter / per_epoch;
    if (epoch != indices_epoch) {
      sampler.set_epoch(epoch);
      indices = sampler.indices();
      indices_epoch = epoch;
    }
    const auto started = std::chrono::steady_clock::now();
    const auto begin = indices.begin() + (iter % per_epoch) * options_.batch_size;
    const auto end = std::min(begin + options_.batch_size, indices.end());
    const auto batch = train_data_->batch({begin, end}, &strategy_->generator());
    result.last_log = model.train_step(batch, optim_wrapper);
    if (parts_->param_scheduler) parts_->param_scheduler->step();
    result.train_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

    const int64_t done = iter + 1;
    auto summary = scalars(result.last_log);
    summary["lr"] = optim_wrapper.optimizer().param_groups()[0].options().get_lr();
    progress_->update(done, format(summary));
    if (options_.val_interval > 0 && done % options_.val_interval == 0 &&
        done < options_.max_iters) {
      result.metrics = val();
      model.train();
    }
    if (options_.checkpoint_interval > 0 && done % options_.checkpoint_interval == 0) {
      result.checkpoints.push_back(save(done));
    }
  }
  result.metrics = val();
  return result;
}

std::map<std::string, double> Runner::val() {
  auto& model = *parts_->model;
  model.eval();
  data::SamplerOptions sampling;
  sampling.shuffle = false;
  sampling.round_up = false;  // every sample counted once
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
