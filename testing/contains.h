#pragma once

#include <string>

// The suites' check that an error message says what it should.
namespace testing_text {

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace testing_text
