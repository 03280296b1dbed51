// Every bad argument of every public entry point of engine/dist (the tensor
// and object collectives, groups, the helpers): an InvalidArgument on the
// rank that passed it, naming the rank, the call and the argument, before
// anything is sent, so that the group is still in step afterwards. On the
// simulator and, the same source, in processes on each backend
// (testing/process), where a call that sent anything before it failed would
// leave the next collective out of step or hanging.
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/dist/dist.h"
#include "testing/contains.h"
#include "testing/harness.h"

namespace dist = engine::dist;

namespace {

using testing_text::contains;

// One bad call: `run(rank, n)` on every rank of a world of `n`, which throws
// InvalidArgument saying `says` on the ranks where `fails(rank)`, and returns
// elsewhere.
struct Row {
  std::string call;
  std::string says;
  std::function<void(int rank, int n)> run;
  // Calls whose check runs on the root only use a world of one, where no
  // other rank is left waiting for the root.
  bool alone = false;
  std::function<bool(int rank)> fails = [](int) { return true; };
};

at::TensorOptions on_device(at::ScalarType dtype = at::kFloat) {
  return at::TensorOptions(dtype).device(harness::device());
}
at::Tensor ones(int64_t size) { return at::ones({size}, on_device()); }
at::Tensor zeros(int64_t size) { return at::zeros({size}, on_device()); }
at::Tensor expanded(int64_t size) { return at::ones({1}, on_device()).expand({size}); }
std::vector<at::Tensor> ones_list(int count, int64_t size) {
  std::vector<at::Tensor> list;
  for (int i = 0; i < count; ++i) list.push_back(ones(size));
  return list;
}

std::vector<Row> collective_rows() {
  return {
      {"all_reduce", "data is an undefined tensor",
       [](int, int) {
         at::Tensor t;
         dist::all_reduce(t);
       }},
      {"all_reduce", "data must be a dense (strided) tensor",
       [](int, int) {
         at::Tensor t = at::ones({2}).to_sparse();
         dist::all_reduce(t);
       }},
      {"all_reduce", "unknown reduce op 'average'",
       [](int, int) {
         at::Tensor t = ones(2);
         dist::all_reduce(t, "average");
       }},
      {"all_reduce", "needs an integer or bool tensor, got Float",
       [](int, int) {
         at::Tensor t = ones(2);
         dist::all_reduce(t, "bxor");
       }},
      {"all_reduce", "cannot reduce ComplexFloat",
       [](int, int) {
         at::Tensor t = at::ones({2}, on_device(at::kComplexFloat));
         dist::all_reduce(t);
       }},
      {"all_reduce", "data has elements that share memory",
       [](int, int) {
         at::Tensor t = expanded(4);
         dist::all_reduce(t);
       }},
      {"all_gather", "data is an undefined tensor",
       [](int, int) { dist::all_gather(at::Tensor()); }},
      {"all_gather_into_tensor", "where a contiguous one of",
       [](int, int n) {
         at::Tensor output = zeros(2 * n + 1);
         dist::all_gather_into_tensor(output, ones(2));
       }},
      {"all_gather_into_tensor", "where a contiguous one of",
       [](int, int n) {
         at::Tensor output = at::zeros({2, n}, on_device()).t();
         dist::all_gather_into_tensor(output, ones(2));
       }},
      {"all_gather_into_tensor", "where a contiguous one of",
       [](int, int n) {
         at::Tensor output = at::zeros({2 * n}, on_device(at::kDouble));
         dist::all_gather_into_tensor(output, ones(2));
       }},
      {"all_gather_into_tensor", "output and data share memory",
       [](int, int n) {
         at::Tensor output = zeros(2 * n);
         dist::all_gather_into_tensor(output, output.narrow(0, 1, 2));
       }},
      {"gather", "dst -1 is not in group [0, ", [](int, int) { dist::gather(ones(2), -1); }},
      {"broadcast", "src 64 is not in group",
       [](int, int) {
         at::Tensor t = ones(2);
         dist::broadcast(t, 64);
       }},
      {"broadcast", "data has elements that share memory",
       [](int, int) {
         at::Tensor t = expanded(4);
         dist::broadcast(t, 0);
       }},
      {"reduce", "dst -1 is not in group",
       [](int, int) {
         at::Tensor t = ones(2);
         dist::reduce(t, -1);
       }},
      {"reduce", "unknown reduce op 'median'",
       [](int, int) {
         at::Tensor t = ones(2);
         dist::reduce(t, 0, "median");
       }},
      {"reduce", "data has elements that share memory",
       [](int, int) {
         at::Tensor t = expanded(4);
         dist::reduce(t, 0);
       }},
      {"scatter", "src 64 is not in group",
       [](int, int n) {
         at::Tensor t = zeros(2);
         dist::scatter(t, ones_list(n, 2), 64);
       }},
      {"scatter", "data has elements that share memory",
       [](int, int n) {
         at::Tensor t = expanded(4);
         dist::scatter(t, ones_list(n, 4), 0);
       }},
      {"scatter", "scatter_list holds 2 tensors; the group has 1 ranks",
       [](int, int) {
         at::Tensor t = zeros(2);
         dist::scatter(t, ones_list(2, 2), 0);
       },
       true},
      {"scatter", "scatter_list holds a",
       [](int, int) {
         at::Tensor t = zeros(2);
         dist::scatter(t, {ones(3)}, 0);
       },
       true},
      {"scatter", "data and scatter_list[0] share memory",
       [](int, int) {
         at::Tensor buffer = zeros(8);
         at::Tensor data = buffer.narrow(0, 2, 4);
         dist::scatter(data, {buffer.narrow(0, 0, 4)}, 0);
       },
       true},
      {"reduce_scatter", "inputs holds",
       [](int, int n) {
         at::Tensor output = zeros(2);
         dist::reduce_scatter(output, ones_list(n - 1, 2));
       }},
      {"reduce_scatter", "inputs holds a",
       [](int, int n) {
         at::Tensor output = zeros(2);
         std::vector<at::Tensor> inputs = ones_list(n, 2);
         inputs.back() = at::ones({2}, on_device(at::kDouble));
         dist::reduce_scatter(output, inputs);
       }},
      {"reduce_scatter", "share memory, so the call would read what it writes",
       [](int rank, int n) {
         std::vector<at::Tensor> inputs = ones_list(n, 2);
         at::Tensor output = inputs[(rank + 1) % n];
         dist::reduce_scatter(output, inputs);
       }},
      {"reduce_scatter_tensor", "input holds a",
       [](int, int n) {
         at::Tensor output = zeros(2);
         dist::reduce_scatter_tensor(output, ones(2 * n - 1));
       }},
      {"reduce_scatter_tensor", "output and input share memory",
       [](int, int n) {
         at::Tensor input = ones(2 * n);
         at::Tensor output = input.narrow(0, 1, 2);
         dist::reduce_scatter_tensor(output, input);
       }},
      {"all_to_all", "inputs is empty",
       [](int, int n) {
         std::vector<at::Tensor> outputs = ones_list(n, 2);
         dist::all_to_all(outputs, {});
       }},
      {"all_to_all", "outputs holds",
       [](int, int n) {
         std::vector<at::Tensor> outputs = ones_list(n + 1, 2);
         dist::all_to_all(outputs, ones_list(n, 2));
       }},
      {"all_to_all", "outputs[0] and outputs[1] share memory",
       [](int, int n) {
         at::Tensor buffer = zeros(2 * n);
         std::vector<at::Tensor> outputs;
         for (int i = 0; i < n; ++i) outputs.push_back(buffer.narrow(0, i == 0 ? 0 : 2 * i - 1, 2));
         dist::all_to_all(outputs, ones_list(n, 2));
       }},
      {"all_to_all", "share memory",
       [](int, int n) {
         std::vector<at::Tensor> inputs = ones_list(n, 2);
         std::vector<at::Tensor> outputs = ones_list(n, 2);
         outputs.back() = inputs.front();
         dist::all_to_all(outputs, inputs);
       }},
      {"send", "a rank cannot send to itself", [](int rank, int) { dist::send(ones(2), rank); }},
      {"send", "dst 64 is not in group", [](int, int) { dist::send(ones(2), 64); }},
      {"send", "needs a group of two or more ranks", [](int, int) { dist::send(ones(2), 0); },
       true},
      {"recv", "a rank cannot receive from itself",
       [](int rank, int) {
         at::Tensor t = zeros(2);
         dist::recv(t, rank);
       }},
      {"recv", "data has elements that share memory",
       [](int rank, int n) {
         at::Tensor t = expanded(4);
         dist::recv(t, (rank + 1) % n);
       }},
  };
}

std::vector<Row> group_rows() {
  return {
      {"new_group", "ranks must be distinct global ranks in [0, ",
       [](int, int) { dist::new_group({}); }},
      {"new_group", "ranks must be distinct global ranks in [0, ",
       [](int, int) {
         dist::new_group({0, 0});
       }},
      {"new_group", "ranks must be distinct global ranks in [0, ",
       [](int, int n) {
         dist::new_group({0, n});
       }},
      {"all_reduce", "this rank is not a member of group [0]",
       [](int, int) {
         const dist::GroupPtr first = dist::new_group({0});
         at::Tensor t = ones(2);
         dist::all_reduce(t, "sum", first);
       },
       false, [](int rank) { return rank != 0; }},
      {"init_local_group", "does not fit world size",
       [](int, int n) { dist::init_local_group(1, n); }},
  };
}

std::vector<Row> object_and_helper_rows() {
  return {
      {"gather_object", "dst 64 is not in group",
       [](int, int) { dist::gather_object(c10::IValue(int64_t{1}), 64); }},
      {"broadcast_object_list", "src -3 is not in group",
       [](int, int) {
         std::vector<c10::IValue> list = {c10::IValue(int64_t{1})};
         dist::broadcast_object_list(list, -3);
       }},
      {"all_reduce_dict", "unknown reduce op 'average'",
       [](int, int) {
         std::map<std::string, at::Tensor> values = {{"loss", ones(1)}};
         dist::all_reduce_dict(values, "average");
       }},
      {"all_reduce_dict", "data[\"loss\"] is an undefined tensor",
       [](int, int) {
         std::map<std::string, at::Tensor> values = {{"acc", ones(1)}, {"loss", at::Tensor()}};
         dist::all_reduce_dict(values);
       }},
      {"all_reduce_params", "unknown reduce op 'average'",
       [](int, int) { dist::all_reduce_params({ones(2)}, true, -1, "average"); }},
      {"all_reduce_params", "params[1] is an undefined tensor",
       [](int, int) {
         dist::all_reduce_params({ones(2), at::Tensor()});
       }},
      {"all_reduce", "unknown reduce op 'average'",
       [](int, int) {
         at::Tensor t = at::ones({2});
         dist::all_reduce_anywhere(t, "average");
       }},
      {"broadcast", "src 64 is not in group",
       [](int, int) {
         at::Tensor t = at::ones({2});
         dist::broadcast_anywhere(t, 64);
       }},
      {"collect_results", "device must be \"cpu\"",
       [](int, int) { dist::collect_results({}, 0, "tpu"); }},
      {"collect_results", "size must be >= 0, got -1",
       [](int, int) { dist::collect_results({}, -1); }},
  };
}

// Runs every row and checks its errors, then that the world is still in step:
// an all_reduce right after it sums every rank's one.
void expect_rejected(const std::vector<Row>& rows) {
  const int world = harness::max_world_size(3);
  for (const Row& row : rows) {
    const int n = row.alone ? 1 : world;
    const auto results = harness::collect_ranks<std::vector<c10::IValue>>(n, [&](int rank) {
      std::string message;
      try {
        row.run(rank, n);
      } catch (const dist::InvalidArgument& e) {
        message = e.what();
      }
      at::Tensor step = ones(1);
      dist::all_reduce(step);
      return std::vector<c10::IValue>{message, step.item<double>()};
    });
    for (int rank = 0; rank < n; ++rank) {
      const std::string where = row.call + " (" + row.says + ") on rank " + std::to_string(rank);
      const std::string message = results[rank][0].toStringRef();
      if (row.fails(rank)) {
        EXPECT_TRUE(contains(message, "[rank " + std::to_string(rank) + "]"))
            << where << ": " << message;
        EXPECT_TRUE(contains(message, row.call + ": ") || contains(message, row.call + "("))
            << where << ": " << message;
        EXPECT_TRUE(contains(message, row.says)) << where << ": " << message;
      } else {
        EXPECT_EQ(message, "") << where;
      }
      EXPECT_EQ(results[rank][1].toDouble(), n) << where << ": the next all_reduce";
    }
  }
}

}  // namespace

TEST(BadArgument, EveryCollectiveRejectsItOnTheRankThatPassedIt) {
  expect_rejected(collective_rows());
}

TEST(BadArgument, GroupsRejectRanksThatDoNotFit) { expect_rejected(group_rows()); }

TEST(BadArgument, ObjectCollectivesAndHelpersRejectIt) {
  expect_rejected(object_and_helper_rows());
}

// The in-place forms stay allowed: each rank's block of the one buffer.
TEST(BadArgument, InPlaceBlocksAreNotSharedMemory) {
  const int n = harness::max_world_size(3);
  const auto results = harness::collect_ranks<at::Tensor>(n, [n](int rank) {
    at::Tensor gathered = zeros(2 * n);
    at::Tensor mine = gathered.narrow(0, 2 * rank, 2);
    mine.fill_(rank + 1);
    dist::all_gather_into_tensor(gathered, mine);
    at::Tensor blocks = at::full({2 * n}, static_cast<double>(rank + 1), on_device());
    at::Tensor reduced = blocks.narrow(0, 2 * rank, 2);
    dist::reduce_scatter_tensor(reduced, blocks);
    return at::cat({gathered, reduced}).cpu();
  });
  std::vector<float> expected;
  for (int r = 0; r < n; ++r) expected.insert(expected.end(), {r + 1.0f, r + 1.0f});
  const float sum = n * (n + 1) / 2.0f;
  expected.insert(expected.end(), {sum, sum});
  for (int rank = 0; rank < n; ++rank) {
    const at::Tensor& got = results[rank];
    EXPECT_EQ(std::vector<float>(got.data_ptr<float>(), got.data_ptr<float>() + got.numel()),
              expected)
        << "rank " << rank;
  }
}
