#pragma once

#include <ATen/core/ivalue.h>

#include <future>
#include <string>
#include <vector>

#include "engine/io/file_system.h"

// Checkpoint files captured now and written later, so that a caller can go
// on training while its state is serialized (in-memory snapshots that overlap
// the next iteration: engine/snapshot/snapshots.h).
namespace engine::checkpoint {

class DeferredSaves {
 public:
  // From here until write_in_background() or the destructor, every
  // save_file (file.h) on this thread copies its content, every tensor in it
  // cloned on its device (and waited for there), and queues it instead of
  // writing it: the caller may change or free what it saved as soon as
  // save_file returns. Only one may capture a
  // thread at a time (a second throws std::logic_error).
  DeferredSaves();
  // Ends the capture; saves not handed to write_in_background() are dropped.
  ~DeferredSaves();
  DeferredSaves(const DeferredSaves&) = delete;
  DeferredSaves& operator=(const DeferredSaves&) = delete;

  // Ends the capture and writes the queued saves, in the order they were
  // made, with save_file on a thread of its own. The future holds "" when
  // every file was written, else the first failure's message (no later save
  // is then written); its destructor waits for the thread.
  std::future<std::string> write_in_background();

  // Queues the save when a DeferredSaves captures this thread; false when
  // none does (save_file then writes it itself).
  static bool defer(const std::string& path, const c10::IValue& content, io::FileSystem& fs);

 private:
  struct Save {
    std::string path;
    c10::IValue content;
    io::FileSystem* fs;
  };
  void end_capture();

  std::vector<Save> saves_;
  bool capturing_ = true;
};

}  // namespace engine::checkpoint
