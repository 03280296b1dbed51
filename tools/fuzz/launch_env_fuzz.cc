// libFuzzer target: the launch environment. The first line names the
// launcher, each further line is NAME=VALUE. launch_spec gives a spec or
// InvalidArgument; any other exception, a crash or a sanitizer report is a
// bug. Slurm node lists and task counts are expanded on the way.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "engine/dist/errors.h"
#include "engine/launch/launch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  std::string launcher;
  std::getline(lines, launcher);
  engine::dist::Environment env;
  for (std::string line; std::getline(lines, line);) {
    const size_t equals = line.find('=');
    if (equals != std::string::npos) env[line.substr(0, equals)] = line.substr(equals + 1);
  }
  try {
    engine::dist::launch_spec(launcher, env);
  } catch (const engine::dist::InvalidArgument&) {
  }
  return 0;
}
