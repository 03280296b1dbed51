#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/flight/chrome_trace.h"
#include "engine/flight/diagnosis.h"
#include "engine/flight/record_files.h"
#include "engine/io/atomic_file.h"

namespace {

constexpr char kUsage[] =
    "usage: flight diagnose <folder or files>...\n"
    "       flight chrome-trace <out.json> <folder or files>...\n"
    "Reads the flight_rank<R>.json files that ranks write to DIST_ENGINE_FLIGHT_DIR.\n";

int run(const std::vector<std::string>& args) {
  if (args.size() >= 2 && args[0] == "diagnose") {
    std::cout << engine::flight::diagnose(
        engine::flight::read_flight_records({args.begin() + 1, args.end()}));
    return 0;
  }
  if (args.size() >= 3 && args[0] == "chrome-trace") {
    const auto records = engine::flight::read_flight_records({args.begin() + 2, args.end()});
    engine::io::write_atomically(args[1], {engine::flight::chrome_trace(records)});
    std::cout << "wrote " << args[1] << " (" << records.size()
              << " ranks); open it in https://ui.perfetto.dev or chrome://tracing\n";
    return 0;
  }
  std::cerr << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Under `bazel run`, paths are the user's, relative to where they ran it.
  if (const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY")) {
    if (chdir(cwd) != 0) std::cerr << "flight: cannot enter " << cwd << "\n";
  }
  try {
    return run({argv + 1, argv + argc});
  } catch (const std::exception& error) {
    std::cerr << "flight: " << error.what() << "\n";
    return 1;
  }
}
