#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/io/file_system.h"

namespace crash_fs {

// An in-memory file system that knows what a crash keeps, after LevelDB's
// FaultInjectionTestEnv: a file's content is durable once synced, a name
// (created, renamed, removed) once its folder is synced. A crash drops
// everything else. Folders are not modelled: every folder exists.
//
// Counted steps are the FileSystem calls. crash_at(k) crashes the machine
// instead of running step k: from then on every call fails with EIO and
// changes nothing. fail_at(k, error) makes step k alone fail with `error`.
// Not thread-safe.
class CrashFileSystem : public engine::io::FileSystem {
 public:
  // Sets `path` to `content`, durably, without counting a step.
  void put(const std::string& path, std::string_view content);
  void crash_at(int step) { crash_at_ = step; }
  void fail_at(int step, int error) {
    fail_at_ = step;
    fail_error_ = error;
  }
  // Crashes now: what is not durable is gone.
  void crash();

  // The content under `path` now; nullopt when there is no such name.
  std::optional<std::string> read(const std::string& path) const;
  // Every name, in order.
  std::vector<std::string> names() const;
  // Steps run so far (the one that crashed or failed included).
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
  struct File {
    std::string content;
    std::string durable;
  };

  // 0 when the step may run; else the error it returns instead.
  int begin_step();
  File* open_file(int handle);

  std::vector<File> files_;
  std::map<std::string, size_t> names_;          // path -> files_ index
  std::map<std::string, size_t> durable_names_;  // what a crash keeps
  std::map<int, size_t> open_;                   // handle -> files_ index
  int next_handle_ = 3;
  int steps_ = 0;
  std::optional<int> crash_at_;
  std::optional<int> fail_at_;
  int fail_error_ = 0;
  bool crashed_ = false;
};

}  // namespace crash_fs
