#include "engine/runner/progress.h"

#include <unistd.h>

#include <cstdio>

#include "engine/dist/info.h"

namespace engine::runner {

Progress::Progress(int64_t total, int64_t log_interval, bool quiet)
    : total_(total),
      log_interval_(log_interval > 0 ? log_interval : 1),
      enabled_(!quiet && dist::is_main_process()),
      terminal_(::isatty(STDOUT_FILENO) != 0) {}

void Progress::update(int64_t done, const std::string& summary) {
  if (!enabled_) return;
  if (terminal_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / (total_ > 0 ? total_ : 1));
    std::printf("\r[%s%s] %lld/%lld  %s\033[K", std::string(filled, '#').c_str(),
                std::string(kWidth - filled, '.').c_str(), static_cast<long long>(done),
                static_cast<long long>(total_), summary.c_str());
    bar_open_ = true;
  } else if (done % log_interval_ == 0 || done == total_) {
    std::printf("iter %lld/%lld  %s\n", static_cast<long long>(done),
                static_cast<long long>(total_), summary.c_str());
  }
  std::fflush(stdout);
}

void Progress::note(const std::string& line) {
  if (!enabled_) return;
  std::printf("%s%s\n", bar_open_ ? "\n" : "", line.c_str());
  bar_open_ = false;
  std::fflush(stdout);
}

}  // namespace engine::runner
