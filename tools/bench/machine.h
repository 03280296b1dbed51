#pragma once

#include <string>

namespace bench {

struct Machine {
  int cores;
  std::string cpu;  // model name from /proc/cpuinfo
};

Machine describe_machine();

// Memory bandwidth B, counting bytes read plus bytes written, of a 2-thread
// memcpy of a 64 MiB buffer (best of several runs), in GB/s.
double memcpy_bandwidth();

}  // namespace bench
