#pragma once

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

// Command lines of the benchmark tools: "--flag value" pairs.
namespace bench {

// Prints "<tool>: <problem>" and the tool's usage text to stderr; exits 2.
[[noreturn]] inline void exit_with_usage(const char* tool, const std::string& problem,
                                         const char* usage) {
  std::cerr << tool << ": " << problem << "\n" << usage;
  std::exit(2);
}

// Calls on_flag(flag, value) for each pair of argv; a last flag without a
// value goes to usage("missing value after <flag>"), which does not return.
template <typename Usage, typename OnFlag>
void for_each_flag(int argc, char** argv, Usage usage, OnFlag on_flag) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value after " + flag);
    on_flag(flag, std::string(argv[++i]));
  }
}

// The flags every step benchmark (ddp_step, sharded_step) takes.
struct StepFlags {
  std::string backend = "gloo";
  std::string model;
  int64_t batch = 64;
  int steps = 10;
  int warmup = 3;
};

// Reads `flag` into `flags` when it is one of theirs (--backend, --model,
// --batch, --steps, --warmup); false for any other flag.
inline bool take_step_flag(StepFlags& flags, const std::string& flag, const std::string& value) {
  if (flag == "--backend") {
    flags.backend = value;
  } else if (flag == "--model") {
    flags.model = value;
  } else if (flag == "--batch") {
    flags.batch = std::stoll(value);
  } else if (flag == "--steps") {
    flags.steps = std::stoi(value);
  } else if (flag == "--warmup") {
    flags.warmup = std::stoi(value);
  } else {
    return false;
  }
  return true;
}

}  // namespace bench
