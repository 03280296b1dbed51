#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

// The size sweep and timing rule shared by the benchmark and its peers, so
// that both sides of a comparison measure the same thing.
namespace bench {

// "4096", "4K", "64M", "1G".
inline int64_t parse_bytes(std::string text) {
  const char unit = text.empty() ? ' ' : static_cast<char>(std::toupper(text.back()));
  const int64_t scale = unit == 'K' ? 1 << 10 : unit == 'M' ? 1 << 20 : unit == 'G' ? 1 << 30 : 1;
  if (scale != 1) text.pop_back();
  return std::stoll(text) * scale;
}

// "all_reduce,broadcast" -> {"all_reduce", "broadcast"}.
inline std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) out.push_back(item);
  return out;
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Sweep {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 64 << 20;
  int factor = 4;
  int iters = 50;
  int warmup = 5;

  // Takes --min-bytes, --max-bytes, --factor, --iters, --warmup; false for
  // any other flag.
  bool parse_flag(const std::string& flag, const std::string& value) {
    if (flag == "--min-bytes")
      min_bytes = parse_bytes(value);
    else if (flag == "--max-bytes")
      max_bytes = parse_bytes(value);
    else if (flag == "--factor")
      factor = std::stoi(value);
    else if (flag == "--iters")
      iters = std::stoi(value);
    else if (flag == "--warmup")
      warmup = std::stoi(value);
    else
      return false;
    return true;
  }

  bool valid() const {
    return min_bytes >= 4 && max_bytes >= min_bytes && factor >= 2 && iters >= 1;
  }

  // Timed calls for one size: `iters` from 1 MiB up, more for smaller
  // messages (up to 2000) so that latencies of a few microseconds are
  // measured over enough calls.
  int iterations_for(int64_t bytes) const {
    const int64_t scaled =
        iters * std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(bytes, 1));
    return static_cast<int>(std::max<int64_t>(iters, std::min<int64_t>(scaled, 2000)));
  }
};

}  // namespace bench
