#include "engine/optim/optim_wrapper_dict.h"

#include <torch/optim/optimizer.h>

#include <set>

#include "engine/dist/dist.h"
#include "engine/dist/errors.h"

namespace engine::optim {
namespace {

[[noreturn]] void refuse_for_dict(const std::string& what) {
  throw dist::InvalidArgument(dist::on_rank(dist::get_rank(), "OptimWrapperDict: " + what));
}

}  // namespace

OptimWrapperDict::OptimWrapperDict(std::vector<Item> wrappers) : wrappers_(std::move(wrappers)) {
  if (wrappers_.empty()) refuse_for_dict("needs at least one optimizer wrapper");
  std::set<std::string> seen;
  for (const auto& [name, wrapper] : wrappers_) {
    if (name.empty()) refuse_for_dict("a wrapper needs a name");
    if (!seen.insert(name).second) refuse_for_dict("the name \"" + name + "\" comes twice");
    if (!wrapper) refuse_for_dict("the wrapper \"" + name + "\" is null");
  }
}

OptimWrapper& OptimWrapperDict::at(const std::string& name) const {
  std::string names;
  for (const auto& [known, wrapper] : wrappers_) {
    if (known == name) return *wrapper;
    names += (names.empty() ? "" : ", ") + known;
  }
  refuse_for_dict("has no wrapper \"" + name + "\"; it has " + names);
}

bool OptimWrapperDict::contains(const std::string& name) const {
  for (const auto& item : wrappers_) {
    if (item.first == name) return true;
  }
  return false;
}

void OptimWrapperDict::zero_grad() {
  for (auto& item : wrappers_) item.second->zero_grad();
}

void OptimWrapperDict::initialize_count_status(int64_t init_counts, int64_t max_counts) {
  for (auto& item : wrappers_) item.second->initialize_count_status(init_counts, max_counts);
}

std::vector<std::pair<std::string, double>> OptimWrapperDict::learning_rates() {
  std::vector<std::pair<std::string, double>> out;
  for (auto& [name, wrapper] : wrappers_) {
    for (const auto& [key, lr] : wrapper->learning_rates()) out.emplace_back(name + "." + key, lr);
  }
  return out;
}

}  // namespace engine::optim
