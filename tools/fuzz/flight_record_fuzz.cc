// libFuzzer target: flight-record files as the diagnosis tool reads them.
// The input holds up to four files, split at "\n--\n". Each parses to a
// record or InvalidArgument; the records then diagnose and write back as
// JSON without an error. Anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/flight/diagnosis.h"
#include "engine/flight/record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<engine::flight::Record> records;
  for (size_t begin = 0, file = 0; begin <= input.size() && file < 4; ++file) {
    const size_t end = std::min(input.find("\n--\n", begin), input.size());
    try {
      records.push_back(engine::flight::record_from_json(input.substr(begin, end - begin), "f"));
    } catch (const engine::dist::InvalidArgument&) {
    }
    begin = end + 4;
  }
  engine::flight::diagnose(records);
  for (const auto& record : records) {
    const std::string json = engine::flight::to_json(record);
    if (engine::flight::to_json(engine::flight::record_from_json(json, "f")) != json) std::abort();
  }
  return 0;
}
