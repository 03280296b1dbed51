#include "engine/registry/config.h"

#include <vector>

#include "engine/dist/info.h"

namespace engine::registry {
namespace {

std::string join(const std::set<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "(none)" : out;
}

}  // namespace

template <>
const char* json_type_name<bool>() {
  return "a boolean";
}
template <>
const char* json_type_name<int>() {
  return "an integer";
}
template <>
const char* json_type_name<int64_t>() {
  return "an integer";
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
  return "an array of integers";
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

}  // namespace

template <>
bool ConfigReader::holds<bool>(const Json& value) {
  return value.is_boolean();
}
template <>
bool ConfigReader::holds<int>(const Json& value) {
  return value.is_number_integer() && value.get<int64_t>() == value.get<int>();
}
template <>
bool ConfigReader::holds<int64_t>(const Json& value) {
  return value.is_number_integer();
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
  return array_of(value, [](const Json& item) { return item.is_number_integer(); });
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
  if (!config_.is_object()) fail("must be a JSON object, not " + config_.dump());
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

void ConfigReader::fail(const std::string& what) const {
  throw ConfigError(dist::on_rank(dist::get_rank(), "config " + section_ + " " + what));
}

}  // namespace engine::registry
