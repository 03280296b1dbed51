#include "testing/pairwise.h"

#include <rapidcheck.h>

#include <stdexcept>

namespace pairwise {
namespace {

// Numbers densely every combination of values of each covered set of
// factors (every two factors, and the sets crossed in full).
class TupleIndex {
 public:
  TupleIndex(const std::vector<Factor>& factors, const std::vector<std::vector<size_t>>& sets)
      : factors_(factors), sets_(sets) {
    for (const auto& set : sets_) {
      offsets_.push_back(size_);
      size_t combinations = 1;
      for (size_t f : set) combinations *= factors_[f].levels.size();
      size_ += combinations;
    }
  }
  size_t size() const { return size_; }
  template <typename Visit>
  void for_each(const Row& row, Visit&& visit) const {
    for (size_t s = 0; s < sets_.size(); ++s) {
      size_t index = 0;
      for (size_t f : sets_[s]) index = index * factors_[f].levels.size() + row[f];
      visit(offsets_[s] + index);
    }
  }

 private:
  const std::vector<Factor>& factors_;
  const std::vector<std::vector<size_t>>& sets_;
  std::vector<size_t> offsets_;
  size_t size_ = 0;
};

// Every two factors, then each crossed set (by name).
std::vector<std::vector<size_t>> covered_sets(
    const std::vector<Factor>& factors, const std::vector<std::vector<std::string>>& crossed) {
  std::vector<std::vector<size_t>> sets;
  for (size_t i = 0; i < factors.size(); ++i) {
    for (size_t j = i + 1; j < factors.size(); ++j) sets.push_back({i, j});
  }
  for (const auto& names : crossed) {
    sets.emplace_back();
    for (const auto& name : names) {
      size_t f = 0;
      while (f < factors.size() && factors[f].name != name) ++f;
      if (f == factors.size()) throw std::invalid_argument("no factor named " + name + " to cross");
      sets.back().push_back(f);
    }
  }
  return sets;
}

std::vector<Row> valid_rows(const std::vector<Factor>& factors, const Validity& valid) {
  size_t product = 1;
  for (const auto& factor : factors) {
    if (factor.levels.empty())
      throw std::invalid_argument("factor " + factor.name + " has no levels");
    product *= factor.levels.size();
    if (product > 1'000'000) throw std::invalid_argument("too many combinations to enumerate");
  }
  std::vector<Row> rows;
  Row row(factors.size(), 0);
  for (size_t n = 0; n < product; ++n) {
    if (valid(named(factors, row))) rows.push_back(row);
    for (size_t f = factors.size(); f-- > 0;) {  // the next row, last factor fastest
      if (++row[f] < static_cast<int>(factors[f].levels.size())) break;
      row[f] = 0;
    }
  }
  return rows;
}

}  // namespace

Values named(const std::vector<Factor>& factors, const Row& row) {
  Values values;
  for (size_t f = 0; f < factors.size(); ++f)
    values[factors[f].name] = factors[f].levels.at(row[f]);
  return values;
}

Values draw(const std::vector<Factor>& factors, const Validity& valid) {
  Values values;
  do {
    for (const auto& factor : factors) values[factor.name] = *rc::gen::elementOf(factor.levels);
  } while (!valid(values));
  return values;
}

const std::string& Grid::level(const Row& row, const std::string& factor) const {
  for (size_t f = 0; f < factors.size(); ++f) {
    if (factors[f].name == factor) return factors[f].levels.at(row.at(f));
  }
  throw std::invalid_argument("no factor named " + factor);
}

std::string Grid::summary() const {
  return std::to_string(rows.size()) + " rows cover all " + std::to_string(combinations) +
         " combinations (every two of " + std::to_string(factors.size()) +
         " options, and the crossed ones)";
}

Grid covering_grid(std::vector<Factor> factors, const Validity& valid,
                   const std::vector<std::vector<std::string>>& crossed) {
  Grid grid;
  grid.factors = std::move(factors);
  const auto sets = covered_sets(grid.factors, crossed);
  const TupleIndex index(grid.factors, sets);
  const std::vector<Row> candidates = valid_rows(grid.factors, valid);
  std::vector<bool> uncovered(index.size(), false);
  for (const Row& row : candidates)
    index.for_each(row, [&](size_t pair) { uncovered[pair] = true; });
  size_t left = 0;
  for (bool wanted : uncovered) left += wanted;
  grid.combinations = left;
  while (left > 0) {
    size_t best = 0, best_gain = 0;
    for (size_t r = 0; r < candidates.size(); ++r) {
      size_t gain = 0;
      index.for_each(candidates[r], [&](size_t combination) { gain += uncovered[combination]; });
      if (gain > best_gain) best = r, best_gain = gain;
    }
    index.for_each(candidates[best], [&](size_t combination) { uncovered[combination] = false; });
    left -= best_gain;
    grid.rows.push_back(candidates[best]);
  }
  return grid;
}

}  // namespace pairwise
