#include "tools/bench/machine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

namespace bench {

Machine describe_machine() {
  Machine machine{static_cast<int>(std::thread::hardware_concurrency()), "unknown"};
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      machine.cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  return machine;
}

double memcpy_bandwidth() {
  constexpr size_t kBytes = size_t{64} << 20;
  constexpr int kThreads = 2;
  std::vector<char> from(kBytes, 1);
  std::vector<char> to(kBytes, 0);
  double best = 1e9;
  for (int run = 0; run < 8; ++run) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const size_t part = kBytes / kThreads;
        std::memcpy(to.data() + t * part, from.data() + t * part, part);
      });
    }
    for (auto& thread : threads) thread.join();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * kBytes / best / 1e9;
}

}  // namespace bench
