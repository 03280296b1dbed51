// libFuzzer target: a config file's bytes, through parse_config, then
// ConfigReader (every key of every nested object read as every type a
// builder asks for), then the FUNCTIONS registry (param_init_fn) building the
// function and applying it to a Linear layer. A result or ConfigError is
// fine; any other exception, a crash or a sanitizer report is a bug.
//
// The other registries build wrappers, optimizers and strategies, which
// link the whole engine; they read their keys through the same ConfigReader.
#include <torch/nn/modules/linear.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/init/init_functions.h"
#include "engine/registry/config.h"

namespace {

using engine::registry::ConfigError;
using engine::registry::ConfigReader;
using engine::registry::Json;

template <typename T>
void read_as(ConfigReader& reader, const std::string& key) {
  try {
    reader.get<T>(key, T{});
  } catch (const ConfigError&) {
  }
}

void read_every_key(const Json& config, const std::string& section) {
  ConfigReader reader(config, section);
  for (const auto& item : config.items()) {
    const std::string& key = item.key();
    read_as<bool>(reader, key);
    read_as<int>(reader, key);
    read_as<int64_t>(reader, key);
    read_as<double>(reader, key);
    read_as<std::string>(reader, key);
    read_as<std::vector<int64_t>>(reader, key);
    read_as<std::vector<double>>(reader, key);
    read_as<std::vector<std::string>>(reader, key);
    if (item.value().is_object()) read_every_key(item.value(), section + "." + key);
  }
  reader.rest();
  reader.finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const Json config = engine::registry::parse_config(
        std::string_view(reinterpret_cast<const char*>(data), size), "the input");
    read_every_key(config, "the input");
    const auto init = engine::model::init::param_init_functions().build(config);
    torch::nn::Linear layer(3, 2);
    init(*layer);
  } catch (const ConfigError&) {
  }
  return 0;
}
