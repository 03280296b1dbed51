#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

// Covering arrays of strength two: a few rows of option values in which
// every pair of values of every two options appears at least once (and, for
// sets of options named to be crossed, every combination of their values),
// so that a suite runs each combination by construction rather than by a
// seed's luck. Random draws stay for everything a row leaves open.
namespace pairwise {

struct Factor {
  std::string name;
  std::vector<std::string> levels;
};

// One value per factor: an index into its levels.
using Row = std::vector<int>;

// Whether a whole row can be run (options that exclude each other).
using Validity = std::function<bool(const Row&)>;

struct Grid {
  std::vector<Factor> factors;
  std::vector<Row> rows;
  // Combinations to cover (the values of two factors, or of a crossed set)
  // that some valid row holds: every one of them is in `rows`.
  size_t combinations = 0;

  const std::string& level(const Row& row, const std::string& factor) const;
  // "N rows cover all M combinations ...".
  std::string summary() const;
};

// Rows, all valid, that cover every pair of values, and every combination
// of the values of each set in `crossed` (factor names), that some valid
// row holds: greedily, each next row the valid one that covers most
// combinations not yet covered (the first such in lexicographic order: the
// same grid on every run). Enumerates every valid row, so the product of
// the level counts must stay small (it is checked: at most a million).
Grid covering_grid(std::vector<Factor> factors, const Validity& valid,
                   const std::vector<std::vector<std::string>>& crossed = {});

}  // namespace pairwise
