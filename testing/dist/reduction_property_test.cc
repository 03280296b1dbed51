// all_reduce, reduce and reduce_scatter (both forms) against a serial reference: exact
// results, bit-identical on every rank, in place on the caller's tensor; and
// all_reduce on node-shared buffers, which does not go through the backend.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <string>

#include "engine/dist/dist.h"
#include "testing/cases.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace dist = engine::dist;
using cases::TensorCase;

namespace {

// The inputs of the case's group, in group-rank order.
std::vector<at::Tensor> of_members(const TensorCase& c, const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> out;
  for (const int r : c.members) out.push_back(inputs[r]);
  return out;
}

// A rank's tensor after the call (the case's group's members make it, the
// other ranks of the world do not), and whether it is still the caller's
// object with the caller's storage.
struct InPlace {
  at::Tensor tensor;
  bool same_object = false;
};

// How an InPlace travels between the processes of a process-mode run.
c10::IValue to_ivalue(const InPlace& result) {
  return c10::ivalue::Tuple::create({result.tensor, result.same_object});
}
void from_ivalue(const c10::IValue& value, InPlace& out) {
  const auto& fields = value.toTupleRef().elements();
  out = InPlace{fields[0].toTensor(), fields[1].toBool()};
}

template <typename Call>
std::vector<InPlace> run_in_place(const TensorCase& c, const std::vector<at::Tensor>& inputs,
                                  Call call) {
  return harness::collect_ranks<InPlace>(
      c.world_size,
      [&](int rank) {
        const dist::GroupPtr group = cases::group_of(c);
        at::Tensor t = cases::laid_out(inputs[rank], c.contiguous);
        const at::Tensor handle = t;
        const void* storage = t.data_ptr();
        if (cases::is_member(c, rank)) call(t, rank, group);
        return InPlace{t, t.is_same(handle) && t.data_ptr() == storage};
      },
      harness::test_options(c.sim_seed));
}

// Group rank k's output is the reduction of the members' inputs[k]; the
// other ranks' outputs are untouched.
void check_scattered(const TensorCase& c, const std::vector<std::vector<at::Tensor>>& inputs,
                     const std::vector<InPlace>& results) {
  for (int r = 0; r < c.world_size; ++r) RC_ASSERT(results[r].same_object);
  for (int r = 0; r < c.world_size; ++r) {
    if (!cases::is_member(c, r)) RC_ASSERT(cases::bit_equal(results[r].tensor, inputs[0][r]));
  }
  for (int k = 0; k < group_size(c); ++k) {
    RC_ASSERT(cases::bit_equal(results[c.members[k]].tensor,
                               cases::reduce_reference(of_members(c, inputs[k]), c.op)));
  }
}

// The simulator's options with node-shared buffers allowed (in process mode
// the backend decides).
sim::WorldOptions node_shared(sim::WorldOptions options = harness::test_options()) {
  options.node_shared_buffers = true;
  return options;
}

// Whether the world's ranks have no shared memory between them (no
// node-shared buffers, no staging): the processes were started with it
// turned off (DIST_ENGINE_NODE_SHARED=0), or on several machines (a
// launcher's LOCAL_WORLD_SIZE below its WORLD_SIZE).
bool node_shared_turned_off() {
  const char* value = std::getenv("DIST_ENGINE_NODE_SHARED");
  if (value != nullptr && std::string(value) == "0") return true;
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const char* world = std::getenv("WORLD_SIZE");
  return local != nullptr && world != nullptr && std::string(local) != world;
}

}  // namespace

HARNESS_PROP(AllReduce, EqualsSerialReferenceOnEveryRankInPlace, ()) {
  const TensorCase c = *cases::tensor_case(cases::all_ops());
  const auto inputs = cases::inputs_of_every_rank(c);
  const auto results = run_in_place(
      c, inputs, [&](at::Tensor& t, int, const auto& group) { dist::all_reduce(t, c.op, group); });
  const at::Tensor expected = cases::reduce_reference(of_members(c, inputs), c.op);
  for (int r = 0; r < c.world_size; ++r) {
    RC_ASSERT(results[r].same_object);
    RC_ASSERT(cases::bit_equal(results[r].tensor, cases::is_member(c, r) ? expected : inputs[r]));
  }
}

HARNESS_PROP(AllReduce, AsyncFormEqualsBlockingForm, ()) {
  const TensorCase c = *cases::tensor_case(cases::all_ops());
  const auto inputs = cases::inputs_of_every_rank(c);
  const auto results = run_in_place(c, inputs, [&](at::Tensor& t, int, const auto& group) {
    dist::WorkPtr work = dist::all_reduce_async(t, c.op, group);
    work->wait();
    if (!work->is_completed() || work->exception())
      throw std::logic_error("work not completed cleanly");
  });
  const at::Tensor expected = cases::reduce_reference(of_members(c, inputs), c.op);
  for (int r = 0; r < c.world_size; ++r) {
    RC_ASSERT(cases::bit_equal(results[r].tensor, cases::is_member(c, r) ? expected : inputs[r]));
  }
}

HARNESS_PROP(Reduce, RootGetsReferenceOthersUntouched, ()) {
  const TensorCase c = *cases::tensor_case(cases::all_ops());
  const auto inputs = cases::inputs_of_every_rank(c);
  const int root = cases::global_root(c);
  const auto results = run_in_place(c, inputs, [&](at::Tensor& t, int, const auto& group) {
    dist::reduce(t, root, c.op, group);
  });
  const at::Tensor expected = cases::reduce_reference(of_members(c, inputs), c.op);
  for (int r = 0; r < c.world_size; ++r) {
    RC_ASSERT(results[r].same_object);
    RC_ASSERT(cases::bit_equal(results[r].tensor, r == root ? expected : inputs[r]));
  }
}

HARNESS_PROP(ReduceScatter, RankKGetsReferenceOfChunkK, ()) {
  const TensorCase c = *cases::tensor_case(cases::all_ops());
  // inputs[k][r]: rank r's contribution to group rank k's output.
  std::vector<std::vector<at::Tensor>> inputs;
  for (int k = 0; k < group_size(c); ++k)
    inputs.push_back(cases::inputs_of_every_rank(c, /*salt=*/k + 1));
  const auto results =
      run_in_place(c, inputs[0], [&](at::Tensor& out, int rank, const auto& group) {
        std::vector<at::Tensor> mine;
        for (int k = 0; k < group_size(c); ++k)
          mine.push_back(cases::laid_out(inputs[k][rank], c.contiguous));
        dist::reduce_scatter(out, mine, c.op, group);
      });
  check_scattered(c, inputs, results);
}

// The one-tensor form: rank r's input holds every rank's block end to end
// (contiguous, or a strided view of the same values), and is left as it was.
HARNESS_PROP(ReduceScatterTensor, RankKGetsReferenceOfBlockK, ()) {
  const TensorCase c = *cases::tensor_case(cases::all_ops());
  std::vector<std::vector<at::Tensor>> inputs;
  for (int k = 0; k < group_size(c); ++k)
    inputs.push_back(cases::inputs_of_every_rank(c, /*salt=*/k + 1));
  std::vector<at::Tensor> stacked;  // rank r's blocks, [group size, shape...]
  for (int r = 0; r < c.world_size; ++r) {
    std::vector<at::Tensor> blocks;
    for (int k = 0; k < group_size(c); ++k) blocks.push_back(inputs[k][r]);
    stacked.push_back(at::stack(blocks));
  }
  const auto results =
      run_in_place(c, inputs[0], [&](at::Tensor& out, int rank, const auto& group) {
        const at::Tensor mine = cases::laid_out(stacked[rank], c.contiguous);
        const at::Tensor before = mine.clone();
        dist::reduce_scatter_tensor(out, mine, c.op, group);
        if (!cases::bit_equal(mine, before)) throw std::logic_error("the input was written");
      });
  check_scattered(c, inputs, results);
}

// Floats of magnitudes from 1e-4 to 1e8, whose sums change with the order
// they are added in, through both forms, each twice: the same bits run after
// run, and where the path reduces in rank order (the simulator; the mpi
// backend's exchange, up to 8 ranks, and its staging area; gloo's gather
// ring up to 64 KiB in all and its staging area from 64 KiB blocks, which
// these sizes fall in) each rank's block is the rank-order sum bit for bit,
// of every size up to 1 MiB.
TEST(ReduceScatter, OrderDependentFloatsSumInRankOrderWhereThePathSaysSo) {
  const int world = harness::max_world_size(5);
  if (world < 3) GTEST_SKIP() << "a sum of two values is the same in either order";
  bool orders_differ = false;
  for (const int64_t count : {int64_t{1}, int64_t{1000}, int64_t{1} << 18}) {
    SCOPED_TRACE("elements per block " + std::to_string(count));
    std::vector<at::Tensor> stacked;  // rank r's blocks, [world, count]
    for (int r = 0; r < world; ++r) {
      stacked.push_back(cases::order_sensitive_floats(r, world * count).reshape({world, count}));
    }
    std::vector<at::Tensor> rank_order, reverse_order;
    for (int k = 0; k < world; ++k) {
      std::vector<at::Tensor> blocks;
      for (int r = 0; r < world; ++r) blocks.push_back(stacked[r][k]);
      rank_order.push_back(cases::sum_in_order(blocks, false));
      reverse_order.push_back(cases::sum_in_order(blocks, true));
    }
    orders_differ |= !at::equal(at::stack(rank_order), at::stack(reverse_order));
    harness::run_ranks(world, [&](int rank) {
      const std::string backend = dist::get_backend().value_or("");
      const at::Tensor input = stacked[rank].to(harness::device());
      std::vector<at::Tensor> outputs;
      for (int run = 0; run < 2; ++run) {
        at::Tensor out = at::empty({count}).to(harness::device());
        dist::reduce_scatter_tensor(out, input.reshape({-1}), "sum");
        outputs.push_back(out.cpu());
        std::vector<at::Tensor> blocks(input.unbind(0));
        out = at::empty({count}).to(harness::device());
        dist::reduce_scatter(out, blocks, "sum");
        outputs.push_back(out.cpu());
      }
      for (const at::Tensor& out : outputs) {
        if (!cases::bit_equal(out, outputs[0]))
          throw std::logic_error("the forms or runs of reduce_scatter gave different bits");
      }
      const bool promised =
          backend == "sim" || backend == "mpi" ||
          (backend == "gloo" && (!node_shared_turned_off() || count * world * 4 <= 65536));
      if (promised && !cases::bit_equal(outputs[0], rank_order[rank])) {
        throw std::logic_error("rank " + std::to_string(rank) +
                               "'s block is not the rank-order sum on " + backend);
      }
    });
  }
  EXPECT_TRUE(orders_differ) << "the inputs cannot tell one order from another";
}

// Large blocks of several dtypes, which the mpi backend stages through
// shared memory chunk by chunk (blocks from 256 KiB, 256 KiB chunks, a
// partial last one): three reduce_scatters and two all_gathers issued before
// any is waited for, then waited for in reverse order, on the world and on a
// subgroup. Exact small integers: every result equals the reference.
TEST(ReduceScatterTensor, LargeBlocksIssuedTogetherAndWaitedInReverseAreExact) {
  const int world = harness::max_world_size(4);
  // Rank r's block k: small integers that differ by rank and block.
  auto block = [](int r, int k, int64_t count, c10::ScalarType dtype) {
    return at::arange(count, at::kLong).add(3 * r + k).remainder(5).to(dtype);
  };
  struct Call {
    at::Tensor output;
    at::Tensor expected;
    dist::WorkPtr work;
  };
  harness::run_ranks(world, [&](int rank) {
    std::vector<int> all(world), all_but_first(world - 1);
    std::iota(all.begin(), all.end(), 0);
    std::iota(all_but_first.begin(), all_but_first.end(), 1);
    std::vector<std::pair<dist::GroupPtr, std::vector<int>>> groups = {{nullptr, all}};
    if (world >= 3) groups.emplace_back(dist::new_group(all_but_first), all_but_first);
    for (const auto& [group, members] : groups) {
      if (group && !group->is_member()) continue;
      const auto n = static_cast<int64_t>(members.size());
      const int me =
          static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
      std::vector<Call> calls;
      auto reduce_scatter = [&](c10::ScalarType dtype, int64_t count, const std::string& op) {
        std::vector<at::Tensor> mine, for_me;
        for (int k = 0; k < n; ++k) mine.push_back(block(rank, k, count, dtype));
        for (const int r : members) for_me.push_back(block(r, me, count, dtype));
        const at::Tensor stacked = at::stack(for_me);
        Call call{at::empty({count}, dtype).to(harness::device()),
                  op == "sum" ? stacked.sum(0, false, dtype) : std::get<0>(stacked.max(0)),
                  {}};
        const at::Tensor input = at::cat(mine).to(harness::device());
        call.work = dist::reduce_scatter_tensor_async(call.output, input, op, group);
        calls.push_back(call);
      };
      auto all_gather = [&](c10::ScalarType dtype, int64_t count) {
        std::vector<at::Tensor> every;
        for (const int r : members) every.push_back(block(r, 7, count, dtype));
        Call call{at::empty({count * n}, dtype).to(harness::device()), at::cat(every), {}};
        const at::Tensor input = block(rank, 7, count, dtype).to(harness::device());
        call.work = dist::all_gather_into_tensor_async(call.output, input, group);
        calls.push_back(call);
      };
      reduce_scatter(at::kFloat, 2 * 65536 + 7, "sum");
      all_gather(at::kInt, 3 * 65536 + 1);
      reduce_scatter(at::kDouble, 40000, "max");
      all_gather(at::kHalf, 131072);
      reduce_scatter(at::kHalf, 200003, "sum");
      for (auto call = calls.rbegin(); call != calls.rend(); ++call) call->work->wait();
      for (size_t i = 0; i < calls.size(); ++i) {
        if (!at::equal(calls[i].output.cpu(), calls[i].expected)) {
          throw std::logic_error("call " + std::to_string(i) + " on " +
                                 (group ? "the subgroup" : "the world") + " is not exact");
        }
      }
    }
  });
}

// The output may lie inside the input: the one-tensor form's in-place call
// (the output is this rank's block of the input, as NCCL allows) and the
// list form given its own tensor of the list. Both still reduce every rank's
// block as it was before the call, small (one gather ring on gloo) and large
// (the chunked ring, which reads every block to its end).
TEST(ReduceScatter, AnOutputInsideTheInputGetsTheSumOfTheBlocksAsTheyWere) {
  const int world = harness::max_world_size(3);
  for (const int64_t count : {int64_t{3}, int64_t{1} << 16}) {
    SCOPED_TRACE("elements per block " + std::to_string(count));
    // Rank r's blocks, [world, count]: small integers, exact in any order.
    auto blocks_of = [&](int r) {
      return at::arange(world * count, at::kFloat)
          .remainder(997)
          .add(r * 1000)
          .reshape({world, count});
    };
    at::Tensor sums = at::zeros({world, count});
    for (int r = 0; r < world; ++r) sums += blocks_of(r);
    harness::run_ranks(world, [&](int rank) {
      auto check = [&](const at::Tensor& out, const std::string& form) {
        if (!cases::bit_equal(out.cpu(), sums[rank])) {
          throw std::logic_error(form + ": rank " + std::to_string(rank) +
                                 "'s output is not the sum of the blocks it had");
        }
      };
      const at::Tensor input = blocks_of(rank).to(harness::device());
      at::Tensor own_block = input[rank];
      dist::reduce_scatter_tensor(own_block, input.view({-1}), "sum");
      check(own_block, "reduce_scatter_tensor");
      std::vector<at::Tensor> list;
      for (const at::Tensor& block : blocks_of(rank).unbind(0)) {
        list.push_back(block.clone().to(harness::device()));
      }
      at::Tensor own_tensor = list[rank];
      dist::reduce_scatter(own_tensor, list, "sum");
      check(own_tensor, "reduce_scatter");
    });
  }
}

// all_reduce of floats whose sums depend on the order they are added in, on
// every path, twice. Every rank gets the same bits, and the same again the
// second time. Where the path reduces in rank order, they are the rank-order
// sum: the simulator and node-shared buffers at every size, and mpi's
// exchange and gloo's gather ring for small tensors (up to 2 KiB a rank, on
// up to 8 ranks, below both thresholds). The large size takes the rings.
TEST(AllReduce, OrderDependentFloatsSumInRankOrderWhereThePathSaysSo) {
  const int world = harness::max_world_size(5);
  if (world < 3) GTEST_SKIP() << "a sum of two values is the same in either order";
  bool orders_differ = false;
  for (const int64_t count : {int64_t{1}, int64_t{500}, int64_t{1} << 18}) {
    for (const bool shared : {false, true}) {
      if (shared && (!harness::device().is_cpu() || node_shared_turned_off())) continue;
      SCOPED_TRACE("elements " + std::to_string(count) + (shared ? ", node-shared" : ""));
      std::vector<at::Tensor> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(cases::order_sensitive_floats(r, count));
      const at::Tensor forward = cases::sum_in_order(inputs, false);
      orders_differ |= !at::equal(forward, cases::sum_in_order(inputs, true));
      const auto results = harness::collect_ranks<at::Tensor>(
          world,
          [&](int rank) {
            const std::string backend = dist::get_backend().value_or("");
            const bool rank_order = backend == "sim" || shared || count * 4 <= 2048;
            std::vector<at::Tensor> twice;
            for (int run = 0; run < 2; ++run) {
              at::Tensor t = shared ? dist::zeros_node_shared(count, at::kFloat)
                                    : at::empty({count}).to(harness::device());
              if (shared != dist::is_node_shared(t))
                throw std::logic_error("no node-shared buffer");
              t.copy_(inputs[rank]);
              dist::all_reduce(t);
              twice.push_back(t.cpu());
            }
            if (!cases::bit_equal(twice[0], twice[1])) {
              throw std::logic_error("two runs of one all_reduce gave different bits");
            }
            if (rank_order && !cases::bit_equal(twice[0], forward)) {
              throw std::logic_error("not the rank-order sum on " + backend +
                                     (shared ? ", node-shared" : ""));
            }
            return twice[0];
          },
          node_shared());
      for (int r = 1; r < world; ++r) {
        EXPECT_TRUE(cases::bit_equal(results[r], results[0])) << "rank " << r;
      }
    }
  }
  EXPECT_TRUE(orders_differ) << "the inputs cannot tell one order from another";
}

// reduce of floats whose sums depend on the order they are added in, to
// every root, twice: the root gets the same bits run after run, and on the
// simulator the rank-order sum. The backends hand reduce to their library
// (MPI_Ireduce, Gloo's reduce through c10d), which promises no order.
TEST(Reduce, OrderDependentFloatsGiveTheSameBitsRunAfterRun) {
  const int world = harness::max_world_size(5);
  if (world < 3) GTEST_SKIP() << "a sum of two values is the same in either order";
  for (const int64_t count : {int64_t{1}, int64_t{500}, int64_t{1} << 18}) {
    SCOPED_TRACE("elements " + std::to_string(count));
    std::vector<at::Tensor> inputs;
    for (int r = 0; r < world; ++r) inputs.push_back(cases::order_sensitive_floats(r, count));
    const at::Tensor forward = cases::sum_in_order(inputs, false);
    harness::run_ranks(world, [&](int rank) {
      const std::string backend = dist::get_backend().value_or("");
      for (int root = 0; root < world; ++root) {
        std::vector<at::Tensor> twice;
        for (int run = 0; run < 2; ++run) {
          at::Tensor t = inputs[rank].clone().to(harness::device());
          dist::reduce(t, root, "sum");
          twice.push_back(t.cpu());
        }
        if (rank != root) continue;
        if (!cases::bit_equal(twice[0], twice[1])) {
          throw std::logic_error("two runs of one reduce gave root " + std::to_string(root) +
                                 " different bits");
        }
        if (backend == "sim" && !cases::bit_equal(twice[0], forward)) {
          throw std::logic_error("root " + std::to_string(root) + " got no rank-order sum");
        }
      }
    });
  }
}

TEST(ReduceScatterTensor, InputOfTheWrongSizeIsNamed) {
  harness::run_ranks(2, [](int) {
    at::Tensor out = at::zeros({3});
    try {
      dist::reduce_scatter_tensor(out, at::zeros({5}));
      ADD_FAILURE() << "no error";
    } catch (const dist::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("2 x 3 elements"), std::string::npos) << e.what();
    }
  });
}

TEST(AllReduce, OpNamesAreCaseInsensitive) {
  const auto results = harness::collect_ranks<at::Tensor>(2, [](int rank) {
    at::Tensor t = at::tensor({rank + 1, 10 * rank}, at::kLong).to(harness::device());
    dist::all_reduce(t, "MaX");
    return t;
  });
  for (const auto& t : results) EXPECT_TRUE(t.cpu().equal(at::tensor({2, 10}, at::kLong)));
}

TEST(AllReduce, MeanOnIntegersTruncatesTowardZero) {
  // [1.5, -1.5] -> [1, -1], as mmengine on torch does.
  const auto results = harness::collect_ranks<at::Tensor>(2, [](int rank) {
    at::Tensor t = (rank == 0 ? at::tensor({1, -1}, at::kLong) : at::tensor({2, -2}, at::kLong))
                       .to(harness::device());
    dist::all_reduce(t, "mean");
    return t;
  });
  for (const auto& t : results) EXPECT_TRUE(t.cpu().equal(at::tensor({1, -1}, at::kLong)));
}

TEST(AllReduce, NcclRefusesBitwiseOpsItLacksOnEveryRank) {
  if (harness::backend() != "nccl") GTEST_SKIP() << "only nccl lacks bitwise reductions";
  const std::vector<std::pair<std::string, c10::ScalarType>> refused = {
      {"band", c10::kInt}, {"bor", c10::kLong}, {"bxor", c10::kByte}, {"bxor", c10::kBool}};
  harness::run_ranks(2, [&](int rank) {
    for (const auto& [op, dtype] : refused) {
      at::Tensor t = at::full({3}, rank + 1).to(harness::device(), dtype);
      try {
        dist::all_reduce(t, op);
        ADD_FAILURE() << op << " on " << dtype << " tensors went through";
      } catch (const dist::InvalidArgument& e) {
        const std::string expected = "nccl has no " + op + " for " + c10::toString(dtype);
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      }
    }
  });
}

// Buffers from zeros_node_shared: all_reduce through shared memory, several
// rounds on one buffer (its counters carry over), against the reference.
HARNESS_PROP(AllReduce, OnNodeSharedBuffersEqualsSerialReferenceEveryRound, ()) {
  const TensorCase c = *cases::tensor_case(cases::all_ops());
  constexpr int kRounds = 3;
  std::vector<std::vector<at::Tensor>> inputs;
  for (int round = 0; round < kRounds; ++round)
    inputs.push_back(cases::inputs_of_every_rank(c, round));
  const bool shareable = c.world_size > 1 && inputs[0][0].numel() > 0 && harness::device().is_cpu();
  const auto results = harness::collect_ranks<std::vector<at::Tensor>>(
      c.world_size,
      [&](int rank) {
        at::Tensor buffer = dist::zeros_node_shared(inputs[0][rank].numel(), c.dtype);
        if (dist::is_node_shared(buffer) != shareable)
          throw std::logic_error("zeros_node_shared: shared memory where not expected, or none");
        buffer = buffer.to(harness::device());
        std::vector<at::Tensor> rounds;
        for (int round = 0; round < kRounds; ++round) {
          buffer.copy_(inputs[round][rank].reshape({-1}));
          dist::all_reduce(buffer, c.op);
          rounds.push_back(buffer.clone());
        }
        return rounds;
      },
      node_shared(harness::test_options(c.sim_seed)));
  for (int round = 0; round < kRounds; ++round) {
    const at::Tensor expected = cases::reduce_reference(inputs[round], c.op).reshape({-1});
    for (const auto& rank_rounds : results)
      RC_ASSERT(cases::bit_equal(rank_rounds[round], expected));
  }
}

// On a group of the world's last two ranks (world ranks 1 and 2 where there
// are 3: group ranks that are not the world's), the waiter's message names
// itself and the rank that never came by their ranks in the world.
TEST(AllReduce, NodeSharedBufferNamesTheRankThatNeverCame) {
  if (!harness::device().is_cpu()) GTEST_SKIP() << "node-shared buffers are CPU memory";
  const int world = harness::max_world_size(3);
  const int waiter = world - 2;
  const auto messages = harness::collect_ranks<std::string>(
      world,
      [&](int rank) -> std::string {
        const dist::GroupPtr pair = dist::new_group({waiter, waiter + 1});
        if (!pair->is_member()) return "";
        at::Tensor buffer = dist::zeros_node_shared(1000, at::kFloat, pair);
        if (!dist::is_node_shared(buffer)) return "not node-shared";
        // The late rank leaves without the all_reduce; its segment stays mapped by the waiter.
        if (rank != waiter) return "";
        try {
          dist::all_reduce_async(buffer, "sum", pair)->wait(std::chrono::milliseconds(100));
        } catch (const dist::Timeout& e) {
          return e.what();
        }
        return "no error";
      },
      node_shared());
  const std::string expected = "[rank " + std::to_string(waiter) +
                               "] all_reduce on a node-shared buffer did not complete within "
                               "100 ms: ranks [" +
                               std::to_string(waiter + 1) + "] never made the matching call";
  EXPECT_NE(messages[waiter].find(expected), std::string::npos) << messages[waiter];
}

TEST(AllReduce, NodeSharedTurnedOffGivesOrdinaryBuffersThatStillReduce) {
  if (!harness::device().is_cpu()) GTEST_SKIP() << "node-shared buffers are CPU memory";
  setenv("DIST_ENGINE_NODE_SHARED", "0", /*overwrite=*/1);
  const auto results = harness::collect_ranks<at::Tensor>(
      2,
      [](int rank) {
        at::Tensor buffer = dist::zeros_node_shared(5, at::kLong);
        if (dist::is_node_shared(buffer)) throw std::logic_error("shared although turned off");
        buffer.fill_(rank + 1);
        dist::all_reduce(buffer);
        return buffer;
      },
      node_shared());
  unsetenv("DIST_ENGINE_NODE_SHARED");
  for (const auto& t : results) EXPECT_TRUE(t.equal(at::full({5}, 3, at::kLong)));
}

// The segments this process maps are read from /proc/self/maps, where the
// kernel marks one whose name is gone " (deleted)": looking for names in
// /dev/shm instead would also see other tests' segments, since sandboxed
// tests share /dev/shm while their pids may coincide.
TEST(AllReduce, NodeSharedBuffersLeaveNothingInDevShm) {
  if (!harness::device().is_cpu()) GTEST_SKIP() << "node-shared buffers are CPU memory";
  auto segments_still_named = [] {
    std::ifstream maps("/proc/self/maps");
    int64_t mapped = 0;
    int64_t named = 0;
    for (std::string line; std::getline(maps, line);) {
      if (line.find("/dev/shm/dist-engine-") == std::string::npos) continue;
      ++mapped;
      if (line.size() < 10 || line.compare(line.size() - 10, 10, " (deleted)") != 0) ++named;
    }
    if (mapped == 0) throw std::logic_error("no segment of the buffer in /proc/self/maps");
    return named;
  };
  const auto results = harness::collect_ranks<int64_t>(
      2,
      [&](int) {
        at::Tensor buffer = dist::zeros_node_shared(1000, at::kFloat);
        if (!dist::is_node_shared(buffer)) throw std::logic_error("not node-shared");
        dist::all_reduce(buffer);
        return segments_still_named();  // names are gone while the buffer lives
      },
      node_shared());
  for (int64_t count : results) EXPECT_EQ(count, 0);
}
