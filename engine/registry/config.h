#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "engine/dist/errors.h"

// Reading mmengine-style JSON configs with errors that say what to fix.
namespace engine::registry {

using Json = nlohmann::json;

// A config that cannot be used: unknown type or key, wrong value type,
// missing key. The message names the config section and the key.
class ConfigError : public dist::InvalidArgument {
 public:
  using dist::InvalidArgument::InvalidArgument;
};

// Throws ConfigError: "config <section> <what>", on this rank.
[[noreturn]] void fail_config(const std::string& section, const std::string& what);

// Bounds on a config read from outside the process, checked before the
// bytes are read and while they are parsed, so that neither a huge file nor
// deep nesting (which copying and printing a JSON value follow by
// recursion) is ever built.
constexpr size_t kMaxConfigBytes = size_t{16} << 20;
constexpr int kMaxConfigDepth = 64;

// Parses `text`, a config that came from `source` (a file's path, for
// messages). ConfigError naming `source`: not JSON (with the byte offset),
// longer than kMaxConfigBytes, nested deeper than kMaxConfigDepth, or not an
// object at the top.
Json parse_config(std::string_view text, const std::string& source);

// Reads the file at `path` (its size checked before it is read) and parses
// it as parse_config does; ConfigError if it cannot be read.
Json read_config_file(const std::string& path);

// `value` as JSON text, cut to about 200 characters, for messages.
std::string brief(const Json& value);

// The JSON type name a C++ value type is read from ("boolean", "integer"...).
template <typename T>
const char* json_type_name();

// Reads the keys of one config object. Each key read is accepted; finish()
// rejects any other key the object holds, naming it and the accepted ones.
class ConfigReader {
 public:
  // `section` names the object in messages, for example
  // "model_wrapper (MMDistributedDataParallel)".
  ConfigReader(const Json& config, std::string section);

  bool has(const std::string& key);
  // Present and null (Python's None).
  bool is_null(const std::string& key);
  // The value of `key`, or `fallback` when absent.
  template <typename T>
  T get(const std::string& key, T fallback) {
    const Json* value = find(key);
    return value ? convert<T>(key, *value) : fallback;
  }
  template <typename T>
  std::optional<T> get_optional(const std::string& key) {
    const Json* value = find(key);
    return value ? std::optional<T>(convert<T>(key, *value)) : std::nullopt;
  }
  template <typename T>
  T require(const std::string& key) {
    const Json* value = find(key);
    if (!value) fail("lacks the required key \"" + key + "\"");
    return convert<T>(key, *value);
  }
  // A whole number in [least, most] (|most| at most 2^53), written as any
  // JSON number (DeepSpeed writes sizes as 5e8), or `fallback` when absent.
  int64_t get_whole(const std::string& key, int64_t fallback, int64_t least, int64_t most);
  // The value as written, of any JSON type, or nullopt when absent.
  std::optional<Json> value(const std::string& key);
  // A nested object (type-checked), or nullopt when absent.
  std::optional<Json> object(const std::string& key);
  // The keys not read so far, as an object, all of them now counted read
  // (for a config that hands its other keys on to another builder).
  Json rest();
  // Throws ConfigError naming every key that was never read.
  void finish() const;
  const std::string& section() const { return section_; }
  [[noreturn]] void fail(const std::string& what) const;

 private:
  const Json* find(const std::string& key);
  template <typename T>
  T convert(const std::string& key, const Json& value) const {
    if (!holds<T>(value)) {
      fail("key \"" + key + "\" must be " + json_type_name<T>() + ", not " +
           std::string(value.type_name()) + " (" + brief(value) + ")");
    }
    return value.get<T>();
  }
  template <typename T>
  static bool holds(const Json& value);

  Json config_;  // a copy: readers often outlive a temporary config
  std::string section_;
  std::set<std::string> accepted_;
};

}  // namespace engine::registry
