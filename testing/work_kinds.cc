#include "testing/work_kinds.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <memory>
#include <stdexcept>

#include "testing/collective_calls.h"

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

// A collective as collective_calls.h describes it, on the two ranks: the
// waiter's inputs are 1s, the late rank's 2s (a list's k-th adds 10 * k),
// and where the call has a root, the waiter receives.
at::Tensor input_of(int group_rank, int k) {
  return at::full({kNumel}, (group_rank == 0 ? 1.0 : 2.0) + 10.0 * k);
}

bool same_values(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& expected) {
  if (got.size() != expected.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!got[i].equal(expected[i])) return false;
  }
  return true;
}

Kind described(const collective_calls::Collective& collective) {
  using collective_calls::Root;
  const int root = collective.root == Root::kSends ? 1 : 0;
  std::string name = collective.name;
  if (collective.root == Root::kSends) name += " from the late rank";
  if (collective.root == Root::kReceives) name += " to the waiter";
  return simple(std::move(name), [collective, root](const GroupPtr& group) {
    const int me = group->rank();
    auto buffers =
        std::make_shared<collective_calls::Buffers>(collective.prepare(input_of, me, 2, root));
    dist::WorkPtr work = collective.start(*buffers, root, group);
    return Waiting{work, [collective, buffers, me, root] {
                     return same_values(collective.results(*buffers),
                                        collective.expected(input_of, me, 2, root));
                   }};
  });
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
  std::vector<Kind> kinds = {
      simple("all_reduce mean", [](const GroupPtr& g) { return all_reduce(g, "mean", 1.5); }),
      simple("all_reduce of a strided tensor", all_reduce_strided),
      point_to_point(simple("recv from the late rank", recv_from_the_late_rank)),
      node_shared_mean(),
  };
  for (const auto& collective : collective_calls::all_collectives()) {
    kinds.push_back(described(collective));
  }
  return kinds;
}

bool names_only_rank(const std::string& message, int rank, int world_size) {
  for (int other = 0; other < world_size; ++other) {
    const bool named = message.find("[rank " + std::to_string(other) + "]") != std::string::npos;
    if (named != (other == rank)) return false;
  }
  return true;
}

}  // namespace work_kinds
