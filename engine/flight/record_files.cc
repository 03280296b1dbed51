#include "engine/flight/record_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/dist/errors.h"

namespace engine::flight {
namespace {

namespace fs = std::filesystem;

bool is_record_file(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.rfind("flight_rank", 0) == 0 && path.extension() == ".json";
}

std::vector<std::string> record_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& path : paths) {
    if (!fs::is_directory(path)) {
      files.push_back(path);
      continue;
    }
    for (const auto& item : fs::directory_iterator(path)) {
      if (item.is_regular_file() && is_record_file(item.path())) files.push_back(item.path());
    }
  }
  return files;
}

Record read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw dist::InvalidArgument("cannot open flight record " + path);
  std::stringstream text;
  text << in.rdbuf();
  return record_from_json(text.str(), path);
}

}  // namespace

std::vector<Record> read_flight_records(const std::vector<std::string>& paths) {
  std::vector<Record> records;
  for (const auto& file : record_files(paths)) records.push_back(read_file(file));
  if (records.empty()) {
    throw dist::InvalidArgument(
        "no flight records (flight_rank*.json) found; give the folder "
        "DIST_ENGINE_FLIGHT_DIR named, or the files");
  }
  std::sort(records.begin(), records.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  for (size_t i = 1; i < records.size(); ++i) {
    if (records[i].rank == records[i - 1].rank) {
      throw dist::InvalidArgument("two flight records of rank " + std::to_string(records[i].rank) +
                                  "; give the files of one run");
    }
  }
  return records;
}

}  // namespace engine::flight
