#pragma once

#include <cstdint>
#include <string>

namespace engine::runner {

// Rank 0's training output: a redrawn progress bar on a terminal, plain
// lines every log_interval iterations otherwise (logs, CI). Other ranks and
// quiet runs print nothing.
class Progress {
 public:
  Progress(int64_t total, int64_t log_interval, bool quiet);
  // After iteration `done` (1-based) with its summary ("loss 0.41 lr 0.1").
  void update(int64_t done, const std::string& summary);
  // A line of its own (validation results, checkpoints).
  void note(const std::string& line);

 private:
  int64_t total_;
  int64_t log_interval_;
  bool enabled_;
  bool terminal_;
  bool bar_open_ = false;
};

}  // namespace engine::runner
