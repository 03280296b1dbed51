#pragma once

#include <string>
#include <string_view>
#include <system_error>

namespace engine::io {

// The file operations an atomic write is made of, so that a test can put a
// file system underneath that fails or crashes at any step (LevelDB's Env
// habit). Every call returns 0 or an errno value; a handle is valid from
// open_for_write until close.
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Creates `folder` and its parents; 0 when they exist already.
  virtual int create_directories(const std::string& folder) = 0;
  // Creates `path`, or truncates it if it exists, for writing; sets `handle`.
  virtual int open_for_write(const std::string& path, int& handle) = 0;
  // Appends all of `data`.
  virtual int write(int handle, std::string_view data) = 0;
  // Makes what was written durable: after it, a crash keeps the content.
  virtual int sync(int handle) = 0;
  virtual int close(int handle) = 0;
  // Replaces `to` with `from` in one step.
  virtual int rename(const std::string& from, const std::string& to) = 0;
  virtual int remove(const std::string& path) = 0;
  // Makes the names in `folder` durable (created, renamed, removed entries);
  // "" is the current folder.
  virtual int sync_folder(const std::string& folder) = 0;
};

// This process's file system, through POSIX calls.
FileSystem& posix_file_system();

// The whole content of `path`, in reads of its size as the file system
// reports it (not a byte at a time, as through an istreambuf_iterator).
// Throws std::runtime_error naming `path` and the system's reason when it
// cannot be opened or read, or when it shrank while it was read.
std::string read_file(const std::string& path);

// std::filesystem::remove_all's contract: removes `path` and, for a folder,
// everything under it, without following symbolic links; a missing `path` is
// no error. The engine calls these instead, because the libtorch.so of
// PyTorch 2.11's wheels exports a copy of std::filesystem::remove_all that
// calls symbols the C++ runtime may lack (address 0, a crash; pytorch#133437),
// and any program that links that LibTorch would run that copy.
// The first throws std::system_error naming `path`; the second sets `error`.
void remove_all(const std::string& path);
void remove_all(const std::string& path, std::error_code& error);

}  // namespace engine::io
