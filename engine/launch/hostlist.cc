#include "engine/launch/hostlist.h"

#include <cctype>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

[[noreturn]] void malformed(const std::string& variable, const std::string& value,
                            const std::string& what) {
  throw InvalidArgument(variable + "='" + value + "' is malformed: " + what +
                        "; expected a list like node[01-04,07],gpu3");
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "01-04,07" -> {"01", "02", "03", "04", "07"}.
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& variable,
                                       const std::string& value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    const size_t comma = std::min(ranges.find(',', start), ranges.size());
    const std::string item = ranges.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string low = item.substr(0, dash);
    const std::string high = dash == std::string::npos ? low : item.substr(dash + 1);
    if (!all_digits(low) || !all_digits(high))
      malformed(variable, value, "'" + item + "' is not a number or range");
    if (low.size() > 9 || high.size() > 9)
      malformed(variable, value, "'" + item + "' has too many digits");
    const long first = std::stol(low);
    const long last = std::stol(high);
    if (last < first) malformed(variable, value, "range '" + item + "' runs backwards");
    if (last - first > 100000) malformed(variable, value, "range '" + item + "' is too long");
    for (long n = first; n <= last; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < low.size()) digits.insert(0, low.size() - digits.size(), '0');
      out.push_back(digits);
    }
    start = comma + 1;
  }
  return out;
}

void check_count(size_t count, const std::string& variable, const std::string& value) {
  if (count > kMaxHosts) {
    malformed(variable, value, "it expands to more than " + std::to_string(kMaxHosts) + " entries");
  }
}

// One entry, which may hold several bracket groups.
void expand_entry(const std::string& entry, const std::string& variable, const std::string& value,
                  std::vector<std::string>& out) {
  std::vector<std::string> names = {""};
  size_t at = 0;
  while (at < entry.size()) {
    const size_t open = entry.find('[', at);
    const std::string text =
        entry.substr(at, open == std::string::npos ? std::string::npos : open - at);
    if (text.find(']') != std::string::npos) malformed(variable, value, "']' without '['");
    for (auto& name : names) name += text;
    if (open == std::string::npos) break;
    const size_t close = entry.find(']', open);
    if (close == std::string::npos) malformed(variable, value, "'[' without ']'");
    const auto numbers = expand_ranges(entry.substr(open + 1, close - open - 1), variable, value);
    check_count(out.size() + names.size() * numbers.size(), variable, value);
    std::vector<std::string> product;
    for (const auto& name : names) {
      for (const auto& number : numbers) product.push_back(name + number);
    }
    names = std::move(product);
    at = close + 1;
  }
  check_count(out.size() + names.size(), variable, value);
  out.insert(out.end(), names.begin(), names.end());
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list, const std::string& variable) {
  std::vector<std::string> hosts;
  std::string entry;
  int depth = 0;
  for (const char c : list + ",") {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) malformed(variable, list, "']' without '['");
    const bool separator = depth == 0 && (c == ',' || std::isspace(static_cast<unsigned char>(c)));
    if (!separator) {
      entry += c;
      continue;
    }
    if (!entry.empty()) expand_entry(entry, variable, list, hosts);
    entry.clear();
  }
  if (depth != 0) malformed(variable, list, "'[' without ']'");
  if (hosts.empty()) malformed(variable, list, "it names no host");
  return hosts;
}

std::vector<int> expand_tasks_per_node(const std::string& counts, const std::string& variable) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= counts.size()) {
    const size_t comma = std::min(counts.find(',', start), counts.size());
    const std::string item = counts.substr(start, comma - start);
    const size_t paren = item.find("(x");
    const std::string count = item.substr(0, paren);
    std::string repeat = "1";
    if (paren != std::string::npos) {
      if (item.back() != ')') malformed(variable, counts, "'" + item + "' lacks ')'");
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!all_digits(count) || !all_digits(repeat) || count.size() > 6 || repeat.size() > 6) {
      malformed(variable, counts, "'" + item + "' is not N or N(xM)");
    }
    check_count(out.size() + std::stoul(repeat), variable, counts);
    out.insert(out.end(), std::stoi(repeat), std::stoi(count));
    start = comma + 1;
  }
  return out;
}

}  // namespace engine::dist
