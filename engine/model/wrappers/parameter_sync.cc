#include "engine/model/wrappers/parameter_sync.h"

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/utils/tensor_flatten.h>

#include <map>
#include <sstream>

#include "engine/dist/errors.h"
#include "engine/dist/helpers.h"
#include "engine/dist/objects.h"

namespace engine::model {
namespace {

std::vector<std::string> describe(const std::vector<NamedParameter>& params) {
  std::vector<std::string> lines;
  for (const auto& param : params) {
    std::ostringstream line;
    line << "\"" << param.name << "\" " << param.tensor.sizes() << " "
         << c10::toString(param.tensor.scalar_type());
    lines.push_back(line.str());
  }
  return lines;
}

// "" when equal, else where `mine` (world rank `rank`'s) first differs from
// `reference` (world rank `reference_rank`'s).
std::string first_difference(const std::vector<std::string>& mine, int rank,
                             const std::vector<std::string>& reference, int reference_rank) {
  const std::string on_rank = " on rank " + std::to_string(rank);
  const std::string on_reference = " on rank " + std::to_string(reference_rank);
  for (size_t i = 0; i < std::min(mine.size(), reference.size()); ++i) {
    if (mine[i] != reference[i]) {
      return "parameter " + std::to_string(i) + " is " + mine[i] + on_rank + " but " +
             reference[i] + on_reference;
    }
  }
  if (mine.size() == reference.size()) return "";
  return std::to_string(mine.size()) + " parameters" + on_rank + ", " +
         std::to_string(reference.size()) + on_reference;
}

std::vector<std::string> to_strings(const c10::IValue& value) {
  std::vector<std::string> lines;
  for (const auto& line : value.toListRef()) lines.push_back(line.toStringRef());
  return lines;
}

}  // namespace

std::string dtype_device_key(const at::Tensor& tensor) {
  return std::string(c10::toString(tensor.scalar_type())) + "@" + tensor.device().str();
}

void verify_same_parameters(const std::vector<NamedParameter>& params,
                            const dist::GroupPtr& group) {
  c10::List<std::string> mine;
  for (const auto& line : describe(params)) mine.push_back(line);
  std::vector<c10::IValue> all = dist::all_gather_object(mine, group);
  const std::vector<std::string> reference = to_strings(all.front());
  std::string differences;
  for (size_t rank = 1; rank < all.size(); ++rank) {
    std::string difference =
        first_difference(to_strings(all[rank]), group->global_rank_of(static_cast<int>(rank)),
                         reference, group->global_rank_of(0));
    if (!difference.empty()) differences += "\n  " + difference;
  }
  if (differences.empty()) return;
  throw dist::InvalidArgument(dist::on_rank(
      group->my_global_rank(),
      "the model's parameters differ across ranks:" + differences +
          "\nBuild the same model (same layers, shapes and dtypes, registered in the same order) "
          "on every rank before wrapping it"));
}

void broadcast_from_rank(const std::vector<at::Tensor>& tensors, const dist::GroupPtr& group,
                         int source) {
  std::map<std::string, std::vector<at::Tensor>> by_kind;
  for (const auto& tensor : tensors) {
    by_kind[dtype_device_key(tensor)].push_back(tensor.detach());
  }
  c10::NoGradGuard no_grad;
  for (auto& [kind, members] : by_kind) {
    at::Tensor flat = torch::utils::flatten_dense_tensors(members);
    dist::broadcast_anywhere(flat, group->global_rank_of(source), group);
    auto values = torch::utils::unflatten_dense_tensors(flat, members);
    for (size_t i = 0; i < members.size(); ++i) members[i].copy_(values[i]);
  }
}

}  // namespace engine::model
