#pragma once

#include <rapidcheck.h>

#include <cstddef>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
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

// A row by factor name: each factor's value.
using Values = std::map<std::string, std::string>;
Values named(const std::vector<Factor>& factors, const Row& row);

// Whether a whole row, by name, can be run (options that exclude each
// other).
using Validity = std::function<bool(const Values&)>;

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

// A valid combination drawn at random, every factor's value uniformly
// (redrawn until `valid`): for random cases over the same options as a
// grid. Call it inside a RapidCheck generator.
Values draw(const std::vector<Factor>& factors, const Validity& valid);

// Runs `check` on one case per row of `grid`, drawn by the generator
// `case_for(row)` from a seed of the row's own (the same cases every run).
// The first problem, as "row R (the case shown): problem"; an exception
// counts as one.
template <typename Case, typename CaseFor, typename Check>
std::optional<std::string> first_failing_row(const Grid& grid, CaseFor case_for, Check check) {
  for (size_t r = 0; r < grid.rows.size(); ++r) {
    const Case c = case_for(grid.rows[r])(rc::Random(r + 1)).value();
    std::optional<std::string> problem;
    try {
      problem = check(c);
    } catch (const std::exception& error) {
      problem = error.what();
    }
    if (problem) {
      std::ostringstream shown;
      showValue(c, shown);
      return "row " + std::to_string(r) + " (" + shown.str() + "): " + *problem;
    }
  }
  return std::nullopt;
}

}  // namespace pairwise
