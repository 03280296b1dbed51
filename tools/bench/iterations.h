#pragma once

#include <algorithm>
#include <cstdint>

namespace bench {

// Timed calls for one size: `base` from 1 MiB up, more for smaller messages
// (up to 2000) so that latencies of a few microseconds are measured over
// enough calls. The benchmark and its peers use the same rule.
inline int iterations_for(int64_t bytes, int base) {
  const int64_t scaled =
      base * std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(bytes, 1));
  return static_cast<int>(std::max<int64_t>(base, std::min<int64_t>(scaled, 2000)));
}

}  // namespace bench
