#include "examples/demo.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/tensor.h>
#include <zlib.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/dist/dist.h"
#include "engine/dist/flight.h"
#include "engine/flight/chrome_trace.h"
#include "engine/io/atomic_file.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "examples/classifier.h"
#include "examples/cnn.h"
#include "examples/fashion_mnist.h"

namespace examples {
namespace {

using engine::registry::ConfigReader;
using engine::registry::Json;

engine::runner::RunnerOptions runner_options(const Json& train, const DemoOverrides& overrides) {
  ConfigReader config(train, "train");
  engine::runner::RunnerOptions options;
  options.max_iters = overrides.max_iters.value_or(config.get("max_iters", options.max_iters));
  options.batch_size = config.get("batch_size", options.batch_size);
  options.val_interval = config.get("val_interval", options.val_interval);
  options.checkpoint_interval = overrides.checkpoint_interval.value_or(
      config.get("checkpoint_interval", options.checkpoint_interval));
  options.snapshot_interval = overrides.snapshot_interval.value_or(
      config.get("snapshot_interval", options.snapshot_interval));
  options.snapshot_overlap =
      overrides.snapshot_overlap.value_or(config.get("snapshot_overlap", options.snapshot_overlap));
  options.log_interval = config.get("log_interval", options.log_interval);
  config.finish();
  options.work_dir = overrides.work_dir;
  options.resume_from = overrides.resume_from;
  options.load_from = overrides.load_from;
  options.quiet = overrides.quiet;
  options.ddp_logging_json = overrides.ddp_logging_json;
  return options;
}

// The flattened parameters of rank 0 compared on every rank, bit for bit:
// whole ones, gathered from the shards where the model is sharded.
void check_identical_parameters(engine::strategy::BaseStrategy& strategy, bool quiet) {
  std::vector<at::Tensor> flat;
  engine::model::BaseModel& model = strategy.module();
  if (auto* sharded = dynamic_cast<engine::model::MMFullyShardedDataParallel*>(
          strategy.prepared().model.get())) {
    for (const auto& entry : sharded->full_parameters()) flat.push_back(entry.second.reshape(-1));
  } else {
    for (const auto& parameter : model.parameters()) flat.push_back(parameter.detach().reshape(-1));
  }
  for (const auto& buffer : model.buffers()) flat.push_back(buffer.detach().reshape(-1));
  // On the host, wherever the model trained: the CRC reads the bytes.
  for (auto& piece : flat) piece = piece.to(at::kCPU, at::kFloat);
  at::Tensor mine = at::cat(flat);
  at::Tensor first = mine.clone();
  engine::dist::broadcast_anywhere(first, 0);
  int64_t differs = at::equal(mine, first) ? 0 : 1;
  at::Tensor count = at::tensor({differs});
  engine::dist::all_reduce_anywhere(count);
  if (count.item<int64_t>() != 0) {
    throw engine::dist::DistError(engine::dist::on_rank(
        engine::dist::get_rank(), std::to_string(count.item<int64_t>()) +
                                      " rank(s) hold parameters or buffers that differ from "
                                      "rank 0's after training"));
  }
  if (!quiet && engine::dist::is_main_process()) {
    const auto crc =
        crc32(0, static_cast<const Bytef*>(mine.data_ptr()), static_cast<uInt>(mine.nbytes()));
    std::printf("parameters and buffers identical on all %d ranks (%lld values, crc32 %08lx)\n",
                engine::dist::get_world_size(), static_cast<long long>(mine.numel()), crc);
  }
}

// DemoOverrides::fail_after_batches: `data`, whose training batches end this
// process once `last` have been drawn.
class FailingDataset : public engine::runner::Dataset {
 public:
  FailingDataset(std::shared_ptr<engine::runner::Dataset> data, int64_t last)
      : data_(std::move(data)), left_(last) {}
  int64_t size() const override { return data_->size(); }
  engine::model::TensorDict batch(const std::vector<int64_t>& indices,
                                  at::Generator* rng) const override {
    if (rng && --left_ == 0) {
      std::fprintf(stderr, "train: --fail-after-batches: this rank kills itself now\n");
      std::raise(SIGKILL);
    }
    return data_->batch(indices, rng);
  }

 private:
  std::shared_ptr<engine::runner::Dataset> data_;
  mutable int64_t left_;
};

bool first_attempt() {
  const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return !count || std::string(count) == "0";
}

// "model": {"type": "Mlp" (the default) or "Cnn", and its options}.
std::shared_ptr<engine::model::BaseModel> build_model(const Json& json, at::Generator& rng) {
  ConfigReader config(json, "model");
  const auto type = config.get<std::string>("type", "Mlp");
  if (type == "Cnn") return std::make_shared<Cnn>(cnn_options(config), rng);
  if (type != "Mlp") config.fail("has an unknown type \"" + type + "\" (Mlp or Cnn)");
  return std::make_shared<Classifier>(classifier_options(config), rng);
}

// A dataset section: {"type": "Blobs" (the default) or "FashionMNIST", and
// its options}. Blobs of one run share their class centres (`centres`);
// FashionMNIST unpacks its files under `work_dir`.
std::shared_ptr<engine::runner::Dataset> build_dataset(const Json& json, const std::string& section,
                                                       uint64_t centres,
                                                       const std::string& work_dir) {
  ConfigReader config(json, section);
  const auto type = config.get<std::string>("type", "Blobs");
  if (type == "FashionMNIST") {
    return std::make_shared<FashionMnist>(fashion_mnist_options(config), work_dir + "/data");
  }
  if (type != "Blobs") config.fail("has an unknown type \"" + type + "\" (Blobs or FashionMNIST)");
  return std::make_shared<Blobs>(blobs_options(config), centres);
}

}  // namespace

// Every rank's flight record, gathered on all, written by rank 0.
void write_trace(const std::string& path) {
  namespace dist = engine::dist;
  namespace flight = engine::flight;
  const auto gathered = dist::all_gather_object(flight::to_json(dist::flight_record("demo trace")));
  if (!dist::is_main_process()) return;
  std::vector<flight::Record> records;
  for (const auto& text : gathered) {
    records.push_back(flight::record_from_json(text.toStringRef(), "a gathered record"));
  }
  engine::io::write_atomically(path, {engine::flight::chrome_trace(records)});
  std::printf("wrote the collectives of %zu ranks to %s (open it in https://ui.perfetto.dev)\n",
              records.size(), path.c_str());
}

engine::runner::RunResult run_demo(const Json& config, const DemoOverrides& overrides) {
  ConfigReader top(config, "file");
  Json strategy_config = top.require<Json>("strategy");
  if (overrides.launcher) strategy_config["launcher"] = *overrides.launcher;
  if (overrides.backend) strategy_config["backend"] = *overrides.backend;
  if (overrides.shares_process) strategy_config["seed_process_generator"] = false;
  auto strategy = engine::strategy::strategies().build(strategy_config);
  strategy->setup_env();

  auto model = build_model(top.require<Json>("model"), strategy->generator());
  const uint64_t centres = static_cast<uint64_t>(strategy->shared_seed());
  auto train_set =
      build_dataset(top.require<Json>("train_data"), "train_data", centres, overrides.work_dir);
  const int last_rank = engine::dist::get_world_size() - 1;
  if (overrides.fail_after_batches && first_attempt() && engine::dist::get_rank() == last_rank) {
    train_set = std::make_shared<FailingDataset>(train_set, *overrides.fail_after_batches);
  }
  auto val_set =
      build_dataset(top.require<Json>("val_data"), "val_data", centres, overrides.work_dir);
  const Json optim_wrapper = top.require<Json>("optim_wrapper");
  const auto scheduler = top.object("param_scheduler");
  const auto options = runner_options(top.require<Json>("train"), overrides);
  top.finish();

  engine::runner::Runner runner(strategy, model, optim_wrapper, scheduler, train_set, val_set,
                                accuracy, options);
  auto result = runner.train();
  check_identical_parameters(*strategy, overrides.quiet);
  if (overrides.trace_path) write_trace(*overrides.trace_path);
  return result;
}

}  // namespace examples
