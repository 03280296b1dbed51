#include "testing/cases.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/bitwise_and.h>
#include <ATen/ops/bitwise_or.h>
#include <ATen/ops/bitwise_xor.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <ostream>

#include "engine/dist/dist.h"
#include "testing/harness.h"

namespace cases {
namespace {

bool is_bitwise(const std::string& op) { return op == "band" || op == "bor" || op == "bxor"; }

rc::Gen<std::vector<int64_t>> shape_gen() {
  auto small = rc::gen::container<std::vector<int64_t>>(*rc::gen::inRange<size_t>(0, 4),
                                                        rc::gen::inRange<int64_t>(0, 7));
  // Past the simulator's 64 KiB threshold even for uint8: the parallel path.
  auto large = rc::gen::map(rc::gen::inRange<int64_t>(70000, 140000),
                            [](int64_t n) { return std::vector<int64_t>{n}; });
  return rc::gen::weightedOneOf<std::vector<int64_t>>({{4, small}, {1, large}});
}

// [low, high) of the values for `op`, chosen so that any reduction over up to
// 8 ranks is exact in every dtype of all_dtypes().
std::pair<int64_t, int64_t> value_range(const std::string& op, c10::ScalarType dtype) {
  if (dtype == c10::kBool) return {0, 2};
  const bool is_unsigned = dtype == c10::kByte;
  if (op == "min" || op == "max")
    return is_unsigned ? std::make_pair(0, 201) : std::make_pair(-100, 101);
  if (is_bitwise(op)) return {0, 256};
  return is_unsigned ? std::make_pair(0, 9) : std::make_pair(-8, 9);
}

}  // namespace

const std::vector<std::string>& all_ops() {
  static const std::vector<std::string> ops = {"sum", "mean", "product", "min",
                                               "max", "band", "bor",     "bxor"};
  return ops;
}

std::vector<c10::ScalarType> all_dtypes() {
  return {c10::kFloat, c10::kDouble, c10::kBFloat16, c10::kInt, c10::kLong, c10::kByte, c10::kBool};
}

std::vector<c10::ScalarType> dtypes_for(const std::string& op) {
  std::vector<c10::ScalarType> out;
  for (const auto dtype : all_dtypes()) {
    if (is_bitwise(op) && c10::isFloatingType(dtype)) continue;
    // nccl has band and bor on bool alone (as min and max), and no bxor
    // (AllReduce.NcclRefusesBitwiseOpsItLacksOnEveryRank).
    if (is_bitwise(op) && (op == "bxor" || dtype != c10::kBool) && harness::backend() == "nccl")
      continue;
    if (op == "mean" && dtype == c10::kBool) continue;
    out.push_back(dtype);
  }
  return out;
}

rc::Gen<std::vector<int>> subgroup(int world_size, size_t min_size) {
  return rc::gen::suchThat(
      rc::gen::exec([world_size] {
        std::vector<int> ranks;
        for (int r = 0; r < world_size; ++r) {
          if (*rc::gen::arbitrary<bool>()) ranks.push_back(r);
        }
        return ranks;
      }),
      [min_size](const std::vector<int>& ranks) { return ranks.size() >= min_size; });
}

std::vector<int> all_ranks(int world_size) {
  std::vector<int> ranks(world_size);
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

rc::Gen<std::vector<int>> world_or_subgroup(int world_size) {
  return rc::gen::exec([world_size] {
    return *rc::gen::arbitrary<bool>() ? *subgroup(world_size, 1) : all_ranks(world_size);
  });
}

rc::Gen<TensorCase> group_case() {
  return rc::gen::exec([] {
    TensorCase c;
    c.world_size = *rc::gen::inRange(1, harness::max_world_size(8) + 1);
    c.members = *world_or_subgroup(c.world_size);
    c.root = *rc::gen::inRange(0, static_cast<int>(c.members.size()));
    c.sim_seed = *rc::gen::arbitrary<uint32_t>();
    return c;
  });
}

rc::Gen<TensorCase> tensor_case(const std::vector<std::string>& ops) {
  return rc::gen::exec([ops] {
    TensorCase c = *group_case();
    std::vector<std::string> reducible;
    for (const auto& op : ops) {
      if (!dtypes_for(op).empty()) reducible.push_back(op);
    }
    c.op = reducible.empty() ? "" : *rc::gen::elementOf(reducible);
    c.dtype = *rc::gen::elementOf(c.op.empty() ? all_dtypes() : dtypes_for(c.op));
    c.shape = *shape_gen();
    c.contiguous = *rc::gen::arbitrary<bool>();
    c.data_seed = *rc::gen::arbitrary<uint32_t>();
    return c;
  });
}

void showValue(const TensorCase& c, std::ostream& os) {
  os << "{world_size=" << c.world_size << " op='" << c.op << "' dtype=" << c10::toString(c.dtype)
     << " shape=" << at::IntArrayRef(c.shape) << " contiguous=" << c.contiguous
     << " members=" << at::IntArrayRef(std::vector<int64_t>(c.members.begin(), c.members.end()))
     << " root=" << c.root << " data_seed=" << c.data_seed << " sim_seed=" << c.sim_seed << "}";
}

engine::dist::GroupPtr group_of(const TensorCase& c) { return group_of(c.world_size, c.members); }

engine::dist::GroupPtr group_of(int world_size, const std::vector<int>& members) {
  if (static_cast<int>(members.size()) == world_size) return nullptr;
  return engine::dist::new_group(members);
}

rc::Gen<std::vector<int>> any_ranks(int world_size, int count) {
  return rc::gen::exec([world_size, count] {
    std::vector<int> ranks = all_ranks(world_size);
    for (int i = world_size - 1; i > 0; --i)
      std::swap(ranks[i], ranks[*rc::gen::inRange(0, i + 1)]);
    ranks.resize(count);
    std::sort(ranks.begin(), ranks.end());
    return ranks;
  });
}

int seat_of(const std::vector<int>& members, int rank) {
  const auto it = std::lower_bound(members.begin(), members.end(), rank);
  return it != members.end() && *it == rank ? static_cast<int>(it - members.begin()) : -1;
}

std::vector<pairwise::Factor> placement_factors(int largest_group) {
  pairwise::Factor group_size{"group_size", {}};
  for (int n = 1; n <= largest_group; ++n) group_size.levels.push_back(std::to_string(n));
  return {group_size, {"ranks_outside", {"none", "some"}}};
}

bool placement_fits(const pairwise::Values& values, int max_world_size) {
  return values.at("ranks_outside") == "none" ||
         std::stoi(values.at("group_size")) < max_world_size;
}

rc::Gen<Placement> placement(const pairwise::Values& values, int max_world_size) {
  const int group_size = std::stoi(values.at("group_size"));
  const bool outside = values.at("ranks_outside") == "some";
  return rc::gen::exec([group_size, outside, max_world_size] {
    Placement placed;
    placed.world_size =
        outside ? *rc::gen::inRange(group_size + 1, max_world_size + 1) : group_size;
    placed.members = *any_ranks(placed.world_size, group_size);
    return placed;
  });
}

Split split_world(int world_size, const std::vector<int>& members) {
  Split split{group_of(world_size, members), nullptr};
  std::vector<int> others;
  for (int rank = 0; rank < world_size; ++rank) {
    if (!std::binary_search(members.begin(), members.end(), rank)) others.push_back(rank);
  }
  if (!others.empty()) split.others = engine::dist::new_group(others);
  return split;
}

void keep_busy(const engine::dist::GroupPtr& others) {
  if (!others || !others->is_member()) return;
  for (int round = 0; round < 3; ++round) {
    at::Tensor value = at::ones(
        {3 + round}, at::TensorOptions(at::kLong).device(engine::dist::get_comm_device(others)));
    engine::dist::all_reduce(value, "sum", others);
    engine::dist::broadcast(value, others->global_ranks().back(), others);
  }
}

bool is_member(const TensorCase& c, int rank) {
  return std::binary_search(c.members.begin(), c.members.end(), rank);
}

int group_size(const TensorCase& c) { return static_cast<int>(c.members.size()); }

int global_root(const TensorCase& c) { return c.members.at(c.root); }

at::Tensor input_for(const TensorCase& c, int rank, int salt) {
  auto generator =
      at::make_generator<at::CPUGeneratorImpl>(c.data_seed * 1000003 + rank * 7919 + salt);
  const std::string op = c.op;
  if (op == "product" && c.dtype != c10::kBool) {
    // Factors of +-1 and +-2: every product is a power of two.
    const at::Tensor factors = c.dtype == c10::kByte ? at::tensor({1, 2}, at::kLong)
                                                     : at::tensor({-2, -1, 1, 2}, at::kLong);
    const at::Tensor index = at::randint(0, factors.numel(), c.shape, generator, at::kLong);
    return factors.index_select(0, index.flatten()).view(c.shape).to(c.dtype);
  }
  const auto [low, high] = value_range(op, c.dtype);
  return at::randint(low, high, c.shape, generator, at::kLong).to(c.dtype);
}

std::vector<at::Tensor> inputs_of_every_rank(const TensorCase& c, int salt) {
  std::vector<at::Tensor> inputs;
  for (int r = 0; r < c.world_size; ++r) inputs.push_back(input_for(c, r, salt));
  return inputs;
}

at::Tensor laid_out(const at::Tensor& values, bool contiguous) {
  const at::Device device = harness::device();
  if (contiguous) return values.to(device, /*non_blocking=*/false, /*copy=*/true);
  std::vector<int64_t> padded = values.sizes().vec();
  padded.push_back(2);
  at::Tensor strided = at::zeros(padded, values.options().device(device)).select(-1, 0);
  strided.copy_(values);
  return strided;
}

at::Tensor reduce_reference(const std::vector<at::Tensor>& inputs, const std::string& op) {
  at::Tensor acc = inputs[0].clone();
  for (size_t i = 1; i < inputs.size(); ++i) {
    const at::Tensor& x = inputs[i];
    if (op == "sum" || op == "mean") acc = at::add(acc, x);
    if (op == "product") acc = at::mul(acc, x);
    if (op == "min") acc = at::minimum(acc, x);
    if (op == "max") acc = at::maximum(acc, x);
    if (op == "band") acc = at::bitwise_and(acc, x);
    if (op == "bor") acc = at::bitwise_or(acc, x);
    if (op == "bxor") acc = at::bitwise_xor(acc, x);
  }
  if (op == "mean") {
    const auto n = static_cast<int64_t>(inputs.size());
    acc = c10::isIntegralType(acc.scalar_type(), false) ? acc.div(n, "trunc") : acc.div(n);
  }
  return acc;
}

bool bit_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor ca = a.cpu().contiguous();
  const at::Tensor cb = b.cpu().contiguous();
  return ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

at::Tensor order_sensitive_floats(int rank, int64_t count) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(100 * rank + count);
  const at::Tensor scale = at::pow(10.0, at::randint(-4, 9, {count}, generator));
  return (at::randn({count}, generator) * scale).to(at::kFloat);
}

at::Tensor sum_in_order(const std::vector<at::Tensor>& inputs, bool reverse) {
  const int n = static_cast<int>(inputs.size());
  at::Tensor sum = inputs[reverse ? n - 1 : 0].clone();
  for (int i = 1; i < n; ++i) sum += inputs[reverse ? n - 1 - i : i];
  return sum;
}

}  // namespace cases
