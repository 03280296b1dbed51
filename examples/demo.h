#pragma once

#include <optional>
#include <string>

#include "engine/registry/config.h"
#include "engine/runner/runner.h"

namespace examples {

// What the command line may change in the config file.
struct DemoOverrides {
  std::optional<std::string> launcher;  // strategy.launcher
  std::optional<std::string> backend;   // strategy.backend
  std::optional<int64_t> max_iters;
  std::optional<int64_t> checkpoint_interval;
  std::optional<int64_t> snapshot_interval;
  std::optional<bool> snapshot_overlap;
  std::string work_dir = "work_dirs/train";
  std::optional<std::string> resume_from;
  std::optional<std::string> load_from;
  bool shares_process = false;  // simulator ranks: no process-wide seeding
  bool quiet = false;
  // Where rank 0 writes every rank's calls as one Chrome trace (Perfetto).
  std::optional<std::string> trace_path;
  // Where rank 0 writes DDP's logging data as JSON (RunnerOptions).
  std::optional<std::string> ddp_logging_json;
  // A crash for the restart tests: on the launcher's first attempt
  // (TORCHELASTIC_RESTART_COUNT 0 or unset), the last rank kills its own
  // process with SIGKILL as it draws this many-th training batch.
  std::optional<int64_t> fail_after_batches;
};

// Builds the strategy, model, datasets and runner from the demo's config
// (every section checked for unknown keys), trains, and checks that every
// rank ends with bit-identical parameters (DistError otherwise), and prints
// their CRC-32, which two runs compare. With a trace path, gathers the
// ranks' flight records and writes their timeline.
engine::runner::RunResult run_demo(const engine::registry::Json& config,
                                   const DemoOverrides& overrides);

}  // namespace examples
