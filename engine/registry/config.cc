#include "engine/registry/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <vector>

#include "engine/dist/info.h"

namespace engine::registry {
namespace {

std::string join(const std::set<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "(none)" : out;
}

void check_size(const std::string& source, uintmax_t bytes) {
  if (bytes > kMaxConfigBytes) {
    fail_config(source, "is " + std::to_string(bytes) + " bytes, more than the " +
                            std::to_string(kMaxConfigBytes) + " a config may have");
  }
}

}  // namespace

Json parse_config(std::string_view text, const std::string& source) {
  check_size(source, text.size());
  const auto bounded_depth = [&](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxConfigDepth) {
      fail_config(source, "nests objects and arrays deeper than " +
                              std::to_string(kMaxConfigDepth) + " levels");
    }
    return true;
  };
  Json config;
  try {
    config = Json::parse(text, bounded_depth);
  } catch (const Json::parse_error& error) {
    fail_config(source,
                "is not valid JSON at byte " + std::to_string(error.byte) + ": " + error.what());
  } catch (const Json::exception& error) {  // a number beyond a double's range
    fail_config(source, "is not valid JSON: " + std::string(error.what()));
  }
  if (!config.is_object()) fail_config(source, "must be a JSON object, not " + brief(config));
  return config;
}

Json read_config_file(const std::string& path) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) fail_config(path, "cannot be read: " + error.message());
  check_size(path, size);
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) fail_config(path, "cannot be read");
  return parse_config(text, path);
}

std::string brief(const Json& value) {
  constexpr size_t kBriefChars = 200;
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kBriefChars) text = text.substr(0, kBriefChars) + "...";
  return text;
}

template <>
const char* json_type_name<bool>() {
  return "a boolean";
}
template <>
const char* json_type_name<int>() {
  return "an integer that fits 32 bits";
}
template <>
const char* json_type_name<int64_t>() {
  return "an integer that fits 64 bits";
}
template <>
const char* json_type_name<double>() {
  return "a number";
}
template <>
const char* json_type_name<std::string>() {
  return "a string";
}
template <>
const char* json_type_name<Json>() {
  return "an object";
}
template <>
const char* json_type_name<std::vector<int64_t>>() {
  return "an array of integers that fit 64 bits";
}

template <>
const char* json_type_name<std::vector<double>>() {
  return "an array of numbers";
}
template <>
const char* json_type_name<std::vector<std::string>>() {
  return "an array of strings";
}

namespace {

template <typename Check>
bool array_of(const Json& value, Check check) {
  if (!value.is_array()) return false;
  for (const auto& item : value) {
    if (!check(item)) return false;
  }
  return true;
}

// An integer a signed 64-bit value holds (nlohmann keeps those above
// INT64_MAX as unsigned, which get<int64_t> would wrap to negatives).
bool fits_int64(const Json& value) {
  return value.is_number_integer() &&
         !(value.is_number_unsigned() &&
           value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

}  // namespace

template <>
bool ConfigReader::holds<bool>(const Json& value) {
  return value.is_boolean();
}
template <>
bool ConfigReader::holds<int>(const Json& value) {
  return fits_int64(value) && value.get<int64_t>() == value.get<int>();
}
template <>
bool ConfigReader::holds<int64_t>(const Json& value) {
  return fits_int64(value);
}
template <>
bool ConfigReader::holds<double>(const Json& value) {
  return value.is_number();
}
template <>
bool ConfigReader::holds<std::string>(const Json& value) {
  return value.is_string();
}
template <>
bool ConfigReader::holds<Json>(const Json& value) {
  return value.is_object();
}
template <>
bool ConfigReader::holds<std::vector<int64_t>>(const Json& value) {
  return array_of(value, fits_int64);
}
template <>
bool ConfigReader::holds<std::vector<double>>(const Json& value) {
  return array_of(value, [](const Json& item) { return item.is_number(); });
}
template <>
bool ConfigReader::holds<std::vector<std::string>>(const Json& value) {
  return array_of(value, [](const Json& item) { return item.is_string(); });
}

ConfigReader::ConfigReader(const Json& config, std::string section)
    : config_(config), section_(std::move(section)) {
  if (!config_.is_object()) fail("must be a JSON object, not " + brief(config_));
}

const Json* ConfigReader::find(const std::string& key) {
  accepted_.insert(key);
  auto it = config_.find(key);
  return it == config_.end() ? nullptr : &*it;
}

bool ConfigReader::has(const std::string& key) { return find(key) != nullptr; }

bool ConfigReader::is_null(const std::string& key) {
  const Json* value = find(key);
  return value && value->is_null();
}

int64_t ConfigReader::get_whole(const std::string& key, int64_t fallback, int64_t least,
                                int64_t most) {
  const Json* value = find(key);
  if (!value) return fallback;
  const double number = convert<double>(key, *value);
  if (!(number >= static_cast<double>(least) && number <= static_cast<double>(most) &&
        std::floor(number) == number)) {
    fail("key \"" + key + "\" must be a whole number from " + std::to_string(least) + " to " +
         std::to_string(most) + ", not " + brief(*value));
  }
  return static_cast<int64_t>(number);
}

std::optional<Json> ConfigReader::value(const std::string& key) {
  const Json* found = find(key);
  return found ? std::optional<Json>(*found) : std::nullopt;
}

std::optional<Json> ConfigReader::object(const std::string& key) { return get_optional<Json>(key); }

Json ConfigReader::rest() {
  Json out = Json::object();
  for (const auto& item : config_.items()) {
    if (accepted_.insert(item.key()).second) out[item.key()] = item.value();
  }
  return out;
}

void ConfigReader::finish() const {
  std::set<std::string> unknown;
  for (const auto& item : config_.items()) {
    if (!accepted_.count(item.key())) unknown.insert(item.key());
  }
  if (!unknown.empty()) {
    fail("has unknown key(s) " + join(unknown) + "; accepted keys: " + join(accepted_));
  }
}

void ConfigReader::fail(const std::string& what) const { fail_config(section_, what); }

void fail_config(const std::string& section, const std::string& what) {
  throw ConfigError(dist::on_rank(dist::get_rank(), "config " + section + " " + what));
}

}  // namespace engine::registry
