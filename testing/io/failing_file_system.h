#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "engine/io/file_system.h"

namespace failing_fs {

// What a process that dies in the middle of a write throws (crash_at): not a
// std::exception, so that no error handler on the way takes it for an error
// it could report.
struct Crashed {};

// This process's file system, except at the one step a test names: the real
// disk with a fault injected (where crash_fs::CrashFileSystem models a
// machine's crash in memory). Counted steps are the FileSystem calls, from 0.
// fail_at(k, error) makes step k return `error` and change nothing, as a full
// disk or a refused permission does; crash_at(k) makes it throw Crashed
// instead, as a process killed there: what it wrote before stays on disk, and
// every later call (the cleanups that run while Crashed unwinds, which a dead
// process would not run) fails with EIO and changes nothing.
// Not thread-safe: give each rank its own.
class FailingFileSystem : public engine::io::FileSystem {
 public:
  void fail_at(int step, int error) {
    fail_at_ = step;
    fail_error_ = error;
  }
  void crash_at(int step) { crash_at_ = step; }
  // Steps run so far (the one that failed included).
  int steps() const { return steps_; }

  int create_directories(const std::string& folder) override;
  int open_for_write(const std::string& path, int& handle) override;
  int write(int handle, std::string_view data) override;
  int sync(int handle) override;
  int close(int handle) override;
  int rename(const std::string& from, const std::string& to) override;
  int remove(const std::string& path) override;
  int sync_folder(const std::string& folder) override;

 private:
  // 0 when the step may run; else the error it returns instead.
  int begin_step();

  engine::io::FileSystem& real_ = engine::io::posix_file_system();
  int steps_ = 0;
  std::optional<int> fail_at_;
  int fail_error_ = 0;
  std::optional<int> crash_at_;
  bool crashed_ = false;
};

}  // namespace failing_fs
