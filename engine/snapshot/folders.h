#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

// The snapshot folders of a job's nodes, and the copies between them. Ranks
// whose folder is the same directory (the ranks of one node under
// engine-launch; every rank of a simulated job given one folder) share it,
// and the first of them in rank order reads and writes it for all of them:
// its leader. Folders are numbered in the order of their leaders' ranks.
namespace engine::snapshot {

// The files one folder holds: each path, relative to the folder, to its
// size in bytes.
using Files = std::map<std::string, int64_t>;

// Every file in `folder` and below but the top-level file `marker`; one
// that another writer renames or removes while this lists is left out.
Files files_in(const std::string& folder, const std::string& marker);

struct FolderView {
  std::vector<int> leaders;          // folder -> the global rank of its leader
  std::vector<Files> files;          // folder -> every file in it but its marker
  std::vector<std::string> markers;  // folder -> its marker's content; "" if none
  int mine = 0;                      // this rank's folder

  bool leads(int rank) const { return leaders[mine] == rank; }
  int size() const { return static_cast<int>(leaders.size()); }
};

// Collective: every rank learns what every folder holds. A folder is the
// same directory for two ranks when their host names and the directory's
// device and inode agree. `folder` is created when missing. Throws
// CheckpointError on every rank when a rank cannot read its folder.
FolderView survey(const std::string& folder, const std::string& marker);

// One file to copy from one folder to another.
struct Copy {
  std::string file;  // relative to the folders
  int64_t size = 0;
  int from = 0;
  int to = 0;
};

// Collective: each copy's bytes go from the leader of `from` to the leader
// of `to`, point to point, which writes them atomically into its `folder`
// (the same `copies`, in the same order, on every rank). Copies in every
// direction move at once, at most `bytes_in_flight` of them at a time (or
// one larger copy), which the sending and receiving ranks hold in memory.
// Throws the same CheckpointError on every rank when a leader could not
// read or write its file. No collective when `copies` is empty.
void copy_between(const FolderView& view, const std::string& folder,
                  const std::vector<Copy>& copies, int64_t bytes_in_flight = int64_t{256} << 20);

}  // namespace engine::snapshot
