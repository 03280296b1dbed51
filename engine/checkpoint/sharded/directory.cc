#include "engine/checkpoint/sharded/directory.h"

#include <cstdio>
#include <filesystem>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"

namespace engine::checkpoint::sharded {

std::string in_dir(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

std::string rank_file(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.ckpt", rank);
  return name;
}

CheckpointError error_here(const std::string& what) {
  return CheckpointError(dist::on_rank(dist::get_rank(), what));
}

Dict dict_at(const Dict& dict, const std::string& key, const std::string& file) {
  if (!dict.contains(key)) throw error_here(file + " has no \"" + key + "\" entry");
  return dict.at(key).toGenericDict();
}

}  // namespace engine::checkpoint::sharded
