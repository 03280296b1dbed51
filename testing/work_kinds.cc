#include "testing/work_kinds.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <memory>
#include <stdexcept>

namespace work_kinds {
namespace {

namespace dist = engine::dist;
using dist::GroupPtr;

constexpr int64_t kNumel = 4;

// The waiter's inputs are 1s, the late rank's 2s.
double value_of(const GroupPtr& group) { return group->rank() == 0 ? 1 : 2; }

at::Tensor filled(const GroupPtr& group) { return at::full({kNumel}, value_of(group)); }

bool all_equal(const at::Tensor& t, double value) { return t.eq(value).all().item<bool>(); }

// A kind of Work whose call needs nothing prepared.
Kind simple(std::string name, std::function<Waiting(const GroupPtr&)> call) {
  return {std::move(name),
          [call](const GroupPtr& group) -> Call { return [call, group] { return call(group); }; }};
}

Waiting all_reduce(const GroupPtr& group, const std::string& op, double expected) {
  auto data = std::make_shared<at::Tensor>(filled(group));
  return {dist::all_reduce_async(*data, op, group),
          [data, expected] { return all_equal(*data, expected); }};
}

// A column of a [kNumel, 2] tensor: staged through a contiguous copy and
// written back once the wrapped work completed.
Waiting all_reduce_strided(const GroupPtr& group) {
  auto base = std::make_shared<at::Tensor>(at::full({kNumel, 2}, value_of(group)));
  auto column = std::make_shared<at::Tensor>(base->select(1, 0));
  return {dist::all_reduce_async(*column, "sum", group), [base, column] {
            return all_equal(base->select(1, 0), 3) && all_equal(base->select(1, 1), 1);
          }};
}

Waiting broadcast_from_the_late_rank(const GroupPtr& group) {
  auto data = std::make_shared<at::Tensor>(filled(group));
  return {dist::broadcast_async(*data, group->global_rank_of(1), group),
          [data] { return all_equal(*data, 2); }};
}

Waiting reduce_to_the_waiter(const GroupPtr& group) {
  auto data = std::make_shared<at::Tensor>(filled(group));
  return {dist::reduce_async(*data, group->global_rank_of(0), "sum", group),
          [data] { return all_equal(*data, 3); }};
}

bool ones_then_twos(const std::vector<at::Tensor>& outputs) {
  return outputs.size() == 2 && all_equal(outputs[0], 1) && all_equal(outputs[1], 2);
}

Waiting all_gather(const GroupPtr& group) {
  auto outputs = std::make_shared<std::vector<at::Tensor>>();
  return {dist::all_gather_async(*outputs, filled(group), group),
          [outputs] { return ones_then_twos(*outputs); }};
}

Waiting all_gather_into_tensor(const GroupPtr& group) {
  auto output = std::make_shared<at::Tensor>(at::zeros({2 * kNumel}));
  return {dist::all_gather_into_tensor_async(*output, filled(group), group),
          [output] { return ones_then_twos(output->split(kNumel)); }};
}

Waiting gather_to_the_waiter(const GroupPtr& group) {
  auto outputs = std::make_shared<std::vector<at::Tensor>>();
  return {dist::gather_async(*outputs, filled(group), group->global_rank_of(0), group),
          [outputs] { return ones_then_twos(*outputs); }};
}

Waiting scatter_from_the_late_rank(const GroupPtr& group) {
  auto data = std::make_shared<at::Tensor>(at::zeros({kNumel}));
  std::vector<at::Tensor> pieces;
  if (group->rank() == 1) pieces = {at::full({kNumel}, 10.0), at::full({kNumel}, 20.0)};
  return {dist::scatter_async(*data, pieces, group->global_rank_of(1), group),
          [data] { return all_equal(*data, 10); }};
}

Waiting reduce_scatter(const GroupPtr& group) {
  auto output = std::make_shared<at::Tensor>(at::zeros({kNumel}));
  return {dist::reduce_scatter_async(*output, {filled(group), filled(group)}, "sum", group),
          [output] { return all_equal(*output, 3); }};
}

Waiting reduce_scatter_tensor(const GroupPtr& group) {
  auto output = std::make_shared<at::Tensor>(at::zeros({kNumel}));
  const at::Tensor input = at::full({2 * kNumel}, value_of(group));
  return {dist::reduce_scatter_tensor_async(*output, input, "sum", group),
          [output] { return all_equal(*output, 3); }};
}

// Rank r sends 10 * (its value) + s to rank s.
Waiting all_to_all(const GroupPtr& group) {
  auto outputs = std::make_shared<std::vector<at::Tensor>>(
      std::vector<at::Tensor>{at::zeros({kNumel}), at::zeros({kNumel})});
  const double base = 10 * value_of(group);
  const std::vector<at::Tensor> inputs = {at::full({kNumel}, base), at::full({kNumel}, base + 1)};
  return {dist::all_to_all_async(*outputs, inputs, group),
          [outputs] { return all_equal((*outputs)[0], 10) && all_equal((*outputs)[1], 20); }};
}

Waiting barrier(const GroupPtr& group) {
  return {dist::barrier_async(group), [] { return true; }};
}

// The waiter receives: a small send may complete before it is received
// (MPI's eager protocol), so a send is not a kind of Work that must wait.
Waiting recv_from_the_late_rank(const GroupPtr& group) {
  if (group->rank() == 1) {
    return {dist::send_async(filled(group), group->global_rank_of(0), 0, group),
            [] { return true; }};
  }
  auto data = std::make_shared<at::Tensor>(at::zeros({kNumel}));
  return {dist::recv_async(*data, group->global_rank_of(1), 0, group),
          [data] { return all_equal(*data, 2); }};
}

Kind point_to_point(Kind kind) {
  kind.point_to_point = true;
  return kind;
}

// The mean of a node-shared buffer: the shared-memory work, wrapped for the
// division.
Kind node_shared_mean() {
  return {"node-shared all_reduce mean", [](const GroupPtr& group) -> Call {
            auto buffer =
                std::make_shared<at::Tensor>(dist::zeros_node_shared(kNumel, at::kFloat, group));
            if (!dist::is_node_shared(*buffer)) {
              throw std::runtime_error("no node-shared buffer: the kind would not be tested");
            }
            return [buffer, group] {
              buffer->fill_(value_of(group));
              return Waiting{dist::all_reduce_async(*buffer, "mean", group),
                             [buffer] { return all_equal(*buffer, 1.5); }};
            };
          }};
}

}  // namespace

std::vector<Kind> all_kinds() {
  return {
      simple("all_reduce", [](const GroupPtr& g) { return all_reduce(g, "sum", 3); }),
      simple("all_reduce mean", [](const GroupPtr& g) { return all_reduce(g, "mean", 1.5); }),
      simple("all_reduce of a strided tensor", all_reduce_strided),
      simple("broadcast from the late rank", broadcast_from_the_late_rank),
      simple("reduce to the waiter", reduce_to_the_waiter),
      simple("all_gather", all_gather),
      simple("all_gather_into_tensor", all_gather_into_tensor),
      simple("gather to the waiter", gather_to_the_waiter),
      simple("scatter from the late rank", scatter_from_the_late_rank),
      simple("reduce_scatter", reduce_scatter),
      simple("reduce_scatter_tensor", reduce_scatter_tensor),
      simple("all_to_all", all_to_all),
      simple("barrier", barrier),
      point_to_point(simple("recv from the late rank", recv_from_the_late_rank)),
      node_shared_mean(),
  };
}

bool names_only_rank(const std::string& message, int rank, int world_size) {
  for (int other = 0; other < world_size; ++other) {
    const bool named = message.find("[rank " + std::to_string(other) + "]") != std::string::npos;
    if (named != (other == rank)) return false;
  }
  return true;
}

}  // namespace work_kinds
