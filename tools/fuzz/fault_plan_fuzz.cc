// libFuzzer target: fault plans as text. parse gives a plan that writes
// back to a plan equal to it, or std::invalid_argument; anything else is a
// bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "sim/fault_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sim::FaultPlan plan;
  try {
    plan = sim::FaultPlan::parse(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const std::invalid_argument&) {
    return 0;
  }
  if (!(sim::FaultPlan::parse(plan.to_string()).faults == plan.faults)) std::abort();
  return 0;
}
