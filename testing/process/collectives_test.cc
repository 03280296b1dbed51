// The collectives over a real backend ("mpi" or "gloo", the first argument),
// in N processes started by a launcher (mpirun, or engine-launch with
// torchrun's variables). Inputs are deterministic per rank, so every rank
// computes the exact expected result of every rank itself and checks its own
// bit for bit.
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "engine/dist/dist.h"
#include "testing/cases.h"
#include "testing/process/marker_files.h"

namespace dist = engine::dist;
using cases::TensorCase;

namespace {

// {3001} and {70001} span the mpi all_reduce's exchange (a few KiB up to
// 64 KiB received a rank) and libnbc's ring above it.
const std::vector<std::vector<int64_t>> kShapes = {{}, {0}, {7}, {3, 5}, {3001}, {70001}};

// Every (op, dtype, shape, layout) the suites cover, with a root.
std::vector<TensorCase> grid(const std::vector<std::string>& ops) {
  std::vector<TensorCase> out;
  const int n = dist::get_world_size();
  uint64_t seed = 1;
  for (const auto& op : ops) {
    for (const auto dtype : op.empty() ? cases::all_dtypes() : cases::dtypes_for(op)) {
      for (const auto& shape : kShapes) {
        for (const bool contiguous : {true, false}) {
          TensorCase c;
          c.world_size = n;
          c.op = op;
          c.dtype = dtype;
          c.shape = shape;
          c.contiguous = contiguous;
          c.root = static_cast<int>(seed % n);
          c.data_seed = seed++;
          out.push_back(c);
        }
      }
    }
  }
  return out;
}

std::string name_of(const TensorCase& c) {
  return c.op + " " + c10::toString(c.dtype) + " numel " +
         std::to_string(c10::multiply_integers(c.shape)) + (c.contiguous ? "" : " strided") +
         " root " + std::to_string(c.root);
}

}  // namespace

std::string backend_name;
bool debug_mode = false;

TEST(Process, DebugModeRaisesMismatchOnEveryRankBeforeDataMoves) {
  if (!debug_mode) GTEST_SKIP() << "run with 'detail' to check debug mode";
  const int me = dist::get_rank();
  at::Tensor t = at::ones({me == 1 ? 5 : 4});
  try {
    me == 0 ? dist::broadcast(t, 0) : dist::all_reduce(t);
    ADD_FAILURE() << "no mismatch raised";
  } catch (const dist::CollectiveMismatch& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("group rank 0: broadcast #"), std::string::npos) << message;
    EXPECT_NE(message.find("(root 0, Float[4])"), std::string::npos) << message;
    EXPECT_NE(message.find("group rank 1: all_reduce #"), std::string::npos) << message;
    EXPECT_NE(message.find("(sum, Float[5])"), std::string::npos) << message;
  }
  EXPECT_TRUE(t.equal(at::ones({me == 1 ? 5 : 4}))) << "data moved despite the mismatch";
  // Nothing moved and every rank counted the call: the group is still usable.
  at::Tensor after = at::ones({2});
  dist::all_reduce(after);
  EXPECT_EQ(after[0].item<float>(), dist::get_world_size());
}

TEST(Process, InitDistSetsTheBackendAndTorchrunVariables) {
  EXPECT_EQ(dist::get_backend(), backend_name);
  EXPECT_GE(dist::get_world_size(), 2);
  if (!std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) return;
  // mmengine never sets LOCAL_RANK under mpirun (mmdetection#8940); we do.
  ASSERT_NE(std::getenv("LOCAL_RANK"), nullptr);
  EXPECT_EQ(std::string(std::getenv("LOCAL_RANK")),
            std::string(std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")));
  EXPECT_EQ(std::string(std::getenv("RANK")), std::to_string(dist::get_rank()));
}

TEST(Process, AllReduceAndReduceEqualTheSerialReference) {
  const int me = dist::get_rank();
  for (const auto& c : grid(cases::all_ops())) {
    const auto inputs = cases::inputs_of_every_rank(c);
    const at::Tensor expected = cases::reduce_reference(inputs, c.op);
    at::Tensor t = cases::laid_out(inputs[me], c.contiguous);
    const at::Tensor handle = t;
    dist::all_reduce(t, c.op);
    EXPECT_TRUE(t.is_same(handle)) << name_of(c);
    EXPECT_TRUE(cases::bit_equal(t, expected)) << "all_reduce " << name_of(c);
    at::Tensor r = cases::laid_out(inputs[me], c.contiguous);
    dist::reduce(r, c.root, c.op);
    EXPECT_TRUE(cases::bit_equal(r, me == c.root ? expected : inputs[me]))
        << "reduce " << name_of(c);
  }
}

TEST(Process, ReduceScatterGivesRankKTheReferenceOfChunkK) {
  const int me = dist::get_rank();
  for (const auto& c : grid(cases::all_ops())) {
    std::vector<at::Tensor> mine;
    for (int k = 0; k < c.world_size; ++k)
      mine.push_back(cases::laid_out(cases::input_for(c, me, k + 1), c.contiguous));
    at::Tensor out = cases::laid_out(at::zeros(c.shape, at::TensorOptions(c.dtype)), c.contiguous);
    dist::reduce_scatter(out, mine, c.op);
    const at::Tensor expected =
        cases::reduce_reference(cases::inputs_of_every_rank(c, me + 1), c.op);
    EXPECT_TRUE(cases::bit_equal(out, expected)) << "reduce_scatter " << name_of(c);
    at::Tensor from_one = at::zeros_like(out);
    dist::reduce_scatter_tensor(from_one, at::stack(mine), c.op);
    EXPECT_TRUE(cases::bit_equal(from_one, expected)) << "reduce_scatter_tensor " << name_of(c);
  }
}

// Blocks of 1 MiB and more take other paths than the grid's small shapes
// (mpi: libnbc's MPI_Iallgather; gloo: the chunked ring, several messages).
TEST(Process, AllGatherOfLargeBlocksDeliversExactBytes) {
  const int me = dist::get_rank();
  const int n = dist::get_world_size();
  TensorCase c;
  c.world_size = n;
  c.shape = {300001};  // float: 1.2 MB a rank
  c.data_seed = 7;
  const auto inputs = cases::inputs_of_every_rank(c);
  const at::Tensor mine = cases::laid_out(inputs[me], /*contiguous=*/true);
  const auto gathered = dist::all_gather(mine);
  at::Tensor block = at::empty({n * c.shape[0]}, mine.options());
  dist::all_gather_into_tensor(block, mine);
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(cases::bit_equal(gathered[r], inputs[r])) << "all_gather, rank " << r;
    EXPECT_TRUE(cases::bit_equal(block.narrow(0, r * c.shape[0], c.shape[0]), inputs[r]))
        << "all_gather_into_tensor, rank " << r;
  }
}

TEST(Process, DataMovementDeliversExactBytes) {
  const int me = dist::get_rank();
  const int n = dist::get_world_size();
  for (const auto& c : grid({""})) {
    const auto inputs = cases::inputs_of_every_rank(c);
    at::Tensor b = cases::laid_out(inputs[me], c.contiguous);
    dist::broadcast(b, c.root);
    EXPECT_TRUE(cases::bit_equal(b, inputs[c.root])) << "broadcast " << name_of(c);

    const auto gathered = dist::all_gather(cases::laid_out(inputs[me], c.contiguous));
    const auto at_root = dist::gather(cases::laid_out(inputs[me], c.contiguous), c.root);
    EXPECT_EQ(at_root.size(), me == c.root ? static_cast<size_t>(n) : 0u) << name_of(c);
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(cases::bit_equal(gathered[r], inputs[r])) << "all_gather " << name_of(c);
      if (me == c.root) {
        EXPECT_TRUE(cases::bit_equal(at_root[r], inputs[r])) << "gather " << name_of(c);
      }
    }

    std::vector<at::Tensor> list;
    std::vector<at::Tensor> outputs;
    for (int k = 0; k < n; ++k) {
      list.push_back(cases::laid_out(cases::input_for(c, me, k + 1), c.contiguous));
      outputs.push_back(
          cases::laid_out(at::zeros(c.shape, at::TensorOptions(c.dtype)), c.contiguous));
    }
    at::Tensor s = cases::laid_out(at::zeros(c.shape, at::TensorOptions(c.dtype)), c.contiguous);
    dist::scatter(s, me == c.root ? list : std::vector<at::Tensor>{}, c.root);
    EXPECT_TRUE(cases::bit_equal(s, cases::input_for(c, c.root, me + 1)))
        << "scatter " << name_of(c);
    dist::all_to_all(outputs, list);
    for (int s2 = 0; s2 < n; ++s2) {
      EXPECT_TRUE(cases::bit_equal(outputs[s2], cases::input_for(c, s2, me + 1)))
          << "all_to_all " << name_of(c);
    }
  }
}

// Ranks that are late past the timeout: rank 0 gets a Timeout from
// Work::wait, not a hang. The others come only after rank 0 timed out (a
// marker file says so), so nothing here depends on timing; then the pending
// collective completes and the ranks go on in step.
TEST(Process, LateRanksGiveATimeoutNotAHang) {
  if (debug_mode)
    GTEST_SKIP() << "debug mode checks at the call: a late rank blocks the call, not the wait";
  const int me = dist::get_rank();
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::vector<c10::IValue> name = {c10::IValue(std::string(tmp ? tmp : "/tmp") + "/timed_out_" +
                                               std::to_string(std::random_device{}()))};
  dist::broadcast_object_list(name, 0);
  const std::string marker = name[0].toStringRef();
  at::Tensor t = at::ones({3});
  if (me == 0) {
    dist::WorkPtr work = dist::all_reduce_async(t);
    EXPECT_THROW(work->wait(std::chrono::milliseconds(300)), dist::Timeout);
    std::ofstream(marker) << "timed out\n";
    work->wait();  // the others arrive now
  } else {
    await_files({marker}, std::chrono::minutes(1));
    dist::all_reduce(t);
  }
  EXPECT_EQ(t[0].item<float>(), static_cast<float>(dist::get_world_size()));
  dist::barrier();
  if (me == 0) std::remove(marker.c_str());
}

TEST(Process, SendRecvRing) {
  const int me = dist::get_rank();
  const int n = dist::get_world_size();
  const at::Tensor mine = at::arange(10, at::kLong) + 100 * me;
  dist::WorkPtr sent = dist::send_async(mine, (me + 1) % n, 7);
  at::Tensor in = at::zeros({10}, at::kLong);
  dist::recv(in, (me + n - 1) % n, 7);
  sent->wait();
  EXPECT_TRUE(in.equal(at::arange(10, at::kLong) + 100 * ((me + n - 1) % n)));
}

TEST(Process, SubgroupsAndObjectsAndHelpers) {
  const int me = dist::get_rank();
  const int n = dist::get_world_size();
  const dist::GroupPtr evens = dist::new_group([&] {
    std::vector<int> ranks;
    for (int r = 0; r < n; r += 2) ranks.push_back(r);
    return ranks;
  }());
  at::Tensor t = at::full({2}, me, at::kLong);
  if (evens->is_member()) {
    dist::all_reduce(t, "sum", evens);
    int64_t expected = 0;
    for (int r = 0; r < n; r += 2) expected += r;
    EXPECT_EQ(t[0].item<int64_t>(), expected);
  } else {
    EXPECT_THROW(dist::all_reduce(t, "sum", evens), dist::InvalidArgument);
  }

  const auto objects = dist::all_gather_object(c10::IValue("rank " + std::to_string(me)));
  for (int r = 0; r < n; ++r) EXPECT_EQ(objects[r].toStringRef(), "rank " + std::to_string(r));

  std::vector<c10::IValue> part;
  for (int i = me; i < 10; i += n) part.push_back(i % 3 ? c10::IValue(i) : c10::IValue());
  for (const std::string device : {"cpu", "gpu"}) {
    const auto merged = dist::collect_results(part, 10, device);
    if (me != 0) {
      EXPECT_FALSE(merged.has_value());
      continue;
    }
    ASSERT_EQ(merged->size(), 10u);
    for (int i = 0; i < 10; ++i)
      EXPECT_EQ((*merged)[i].isNone(), i % 3 == 0) << device << " item " << i;
  }
  EXPECT_GE(dist::sync_random_seed(), 0);
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: collectives_test BACKEND [detail] (under a launcher)\n");
    return 2;
  }
  backend_name = argv[1];
  debug_mode = argc == 3 && std::string(argv[2]) == "detail";
  dist::InitOptions options;
  options.timeout = std::chrono::seconds(60);
  options.debug = debug_mode;
  dist::init_dist(dist::infer_launcher(dist::process_environment()), backend_name, options);
  const int failed = RUN_ALL_TESTS() != 0;
  // Every rank leaves with the same verdict.
  at::Tensor verdict = at::full({1}, failed, at::kInt);
  dist::all_reduce(verdict, "max");
  dist::destroy_process_group();
  return verdict.item<int>();
}
