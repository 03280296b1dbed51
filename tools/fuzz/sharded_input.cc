#include "tools/fuzz/sharded_input.h"

#include <ATen/ops/zeros.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "engine/checkpoint/sharded/directory.h"

namespace fuzz {

std::vector<std::string> file_names() {
  namespace sharded = engine::checkpoint::sharded;
  return {sharded::kMarker, sharded::kIndex, sharded::rank_file(0), sharded::rank_file(1)};
}

std::vector<std::string> split_files(std::string_view input) {
  const size_t most = file_names().size();
  std::vector<std::string> contents;
  while (!input.empty() && contents.size() < most) {
    const size_t end = input.find(kFileEnd);
    contents.emplace_back(input.substr(0, end));
    input =
        end == std::string_view::npos ? std::string_view() : input.substr(end + kFileEnd.size());
  }
  return contents;
}

std::string join_files(const std::vector<std::string>& contents) {
  std::string input;
  for (const std::string& content : contents) input += content + std::string(kFileEnd);
  return input;
}

void write_files(const std::string& dir, const std::vector<std::string>& contents) {
  std::filesystem::create_directories(dir);
  const auto names = file_names();
  for (size_t i = 0; i < names.size(); ++i) {
    const auto path = std::filesystem::path(dir) / names[i];
    if (i < contents.size()) {
      std::ofstream(path, std::ios::binary) << contents[i];
    } else {
      std::filesystem::remove(path);
    }
  }
}

std::vector<std::string> read_files(const std::string& dir) {
  std::vector<std::string> contents;
  for (const std::string& name : file_names()) {
    std::ifstream in(std::filesystem::path(dir) / name, std::ios::binary);
    contents.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return contents;
}

engine::checkpoint::ShardedState model_state(int rank, int world) {
  engine::checkpoint::ShardedState state;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> parameters = {
      {"weight", {5, 3}}, {"bias", {1}}, {"scale", {}}, {"empty", {0, 2}}};
  for (const auto& [name, sizes] : parameters) {
    const auto layout = engine::model::sharding::shard_layout(sizes, world);
    state.shards.push_back({name, layout, rank, at::zeros(layout.shard_sizes())});
  }
  return state;
}

}  // namespace fuzz
