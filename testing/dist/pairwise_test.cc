#include "testing/pairwise.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <set>
#include <tuple>

#include "testing/property.h"

namespace {

using pairwise::Factor;
using pairwise::Row;

// (factor, value, factor, value) with the first factor the smaller.
using Pair = std::tuple<size_t, int, size_t, int>;

std::set<Pair> pairs_of(const Row& row) {
  std::set<Pair> pairs;
  for (size_t i = 0; i < row.size(); ++i) {
    for (size_t j = i + 1; j < row.size(); ++j) pairs.insert({i, row[i], j, row[j]});
  }
  return pairs;
}

// Every row of the full product, by brute force: the reference.
std::vector<Row> product(const std::vector<Factor>& factors) {
  std::vector<Row> rows{Row{}};
  for (const auto& factor : factors) {
    std::vector<Row> longer;
    for (const Row& row : rows) {
      for (int level = 0; level < static_cast<int>(factor.levels.size()); ++level) {
        longer.push_back(row);
        longer.back().push_back(level);
      }
    }
    rows = longer;
  }
  return rows;
}

HARNESS_PROP(Pairwise, EveryPairOfAValidRowIsCoveredByValidRows, ()) {
  const int count = *rc::gen::inRange(2, 6);
  std::vector<Factor> factors;
  for (int f = 0; f < count; ++f) {
    Factor factor{"f" + std::to_string(f), {}};
    // Each value named by its index, so that a row is read back from its names.
    for (int l = 0, n = *rc::gen::inRange(1, 5); l < n; ++l) {
      factor.levels.push_back(std::to_string(l));
    }
    factors.push_back(factor);
  }
  // Forbidden pairs make some rows invalid, as options that exclude each other do.
  std::set<Pair> forbidden;
  for (const Row& row : product(factors)) {
    for (const Pair& pair : pairs_of(row)) {
      if (*rc::gen::inRange(0, 8) == 0) forbidden.insert(pair);
    }
  }
  auto allowed = [&](const Row& row) {
    for (const Pair& pair : pairs_of(row)) {
      if (forbidden.count(pair)) return false;
    }
    return true;
  };
  auto valid = [&](const pairwise::Values& values) {
    Row row;
    for (const auto& factor : factors) row.push_back(std::stoi(values.at(factor.name)));
    return allowed(row);
  };
  // Three factors crossed in full: the first, the last and the middle one.
  const std::vector<size_t> crossed = {0, factors.size() / 2, factors.size() - 1};
  auto crossed_values = [&](const Row& row) {
    std::vector<int> values;
    for (size_t f : crossed) values.push_back(row[f]);
    return values;
  };
  const std::vector<std::vector<std::string>> crossed_names = {
      {factors[crossed[0]].name, factors[crossed[1]].name, factors[crossed[2]].name}};
  const auto grid = pairwise::covering_grid(factors, valid, crossed_names);
  std::set<Pair> wanted, covered;
  std::set<std::vector<int>> wanted_crossed, covered_crossed;
  for (const Row& row : product(factors)) {
    if (!allowed(row)) continue;
    wanted.merge(pairs_of(row));
    wanted_crossed.insert(crossed_values(row));
  }
  for (const Row& row : grid.rows) {
    RC_ASSERT(allowed(row));
    covered.merge(pairs_of(row));
    covered_crossed.insert(crossed_values(row));
  }
  RC_ASSERT(covered == wanted);
  RC_ASSERT(covered_crossed == wanted_crossed);
  RC_ASSERT(grid.combinations == wanted.size() + wanted_crossed.size());
  // The same grid every run.
  RC_ASSERT(pairwise::covering_grid(factors, valid, crossed_names).rows == grid.rows);
}

TEST(Pairwise, FarFewerRowsThanTheProductAndNamedLevels) {
  std::vector<Factor> factors;
  for (int f = 0; f < 6; ++f) factors.push_back({"f" + std::to_string(f), {"a", "b", "c"}});
  const auto grid = pairwise::covering_grid(factors, [](const pairwise::Values&) { return true; });
  EXPECT_EQ(grid.combinations, 15u * 9u);
  EXPECT_LE(grid.rows.size(), 20u);  // of 729; at least 9, one per pair of f0 and f1
  EXPECT_GE(grid.rows.size(), 9u);
  EXPECT_EQ(grid.level(grid.rows[0], "f2"), "a");
  EXPECT_EQ(grid.summary().find(std::to_string(grid.rows.size()) + " rows cover all 135"), 0u);
  EXPECT_THROW(grid.level(grid.rows[0], "f9"), std::invalid_argument);
  const auto crossed = pairwise::covering_grid(
      factors, [](const pairwise::Values&) { return true; }, {{"f0", "f1", "f2"}});
  EXPECT_EQ(crossed.combinations, 135u + 27u);
  EXPECT_GE(crossed.rows.size(), 27u);
  EXPECT_THROW(
      pairwise::covering_grid(factors, [](const pairwise::Values&) { return true; }, {{"f7"}}),
      std::invalid_argument);
}

}  // namespace
