// Object collectives move any IValue (through LibTorch's pickler) exactly.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/tensor.h>
#include <gtest/gtest.h>

#include "engine/dist/dist.h"
#include "testing/cases.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace dist = engine::dist;

namespace {

// Plain data drawn by RapidCheck; each rank builds its IValue from it.
struct ObjectCase {
  int64_t number;
  std::string text;
  std::vector<int64_t> values;
  bool with_none;
};

rc::Gen<ObjectCase> object_case() {
  return rc::gen::build<ObjectCase>(
      rc::gen::set(&ObjectCase::number), rc::gen::set(&ObjectCase::text),
      rc::gen::set(&ObjectCase::values), rc::gen::set(&ObjectCase::with_none));
}

c10::IValue make_object(const ObjectCase& c, int rank) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("rank", rank);
  dict.insert("number", c.number);
  dict.insert("text", c.text + std::to_string(rank));
  dict.insert(
      "tensor",
      at::tensor(c.values.empty() ? std::vector<int64_t>{rank} : c.values, at::kLong) + rank);
  dict.insert("scale", 0.5 * rank);
  if (c.with_none) dict.insert("none", c10::IValue());
  return dict;
}

// Structural equality, tensors compared bit for bit.
bool same_object(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor()) return cases::bit_equal(a.toTensor(), b.toTensor());
  if (a.isGenericDict() && b.isGenericDict()) {
    const auto da = a.toGenericDict();
    const auto db = b.toGenericDict();
    if (da.size() != db.size()) return false;
    for (const auto& entry : da) {
      if (!db.contains(entry.key()) || !same_object(entry.value(), db.at(entry.key())))
        return false;
    }
    return true;
  }
  if (a.isList() && b.isList()) {
    const auto la = a.toListRef();
    const auto lb = b.toListRef();
    if (la.size() != lb.size()) return false;
    for (size_t i = 0; i < la.size(); ++i) {
      if (!same_object(la[i], lb[i])) return false;
    }
    return true;
  }
  if (a.isNone() || b.isNone()) return a.isNone() && b.isNone();
  return a.tagKind() == b.tagKind() && a == b;
}

}  // namespace

// Each property runs on the whole world or (in half the cases) on any
// subgroup, with the root anywhere in it; ranks outside the group do not
// call, and keep what they had.

HARNESS_PROP(AllGatherObject, EveryMemberGetsEveryMembersObjectInGroupRankOrder, ()) {
  const cases::TensorCase g = *cases::group_case();
  const ObjectCase c = *object_case();
  const auto results = harness::collect_ranks<std::vector<c10::IValue>>(
      g.world_size,
      [&](int rank) -> std::vector<c10::IValue> {
        const dist::GroupPtr group = cases::group_of(g);
        if (!cases::is_member(g, rank)) return {};
        return dist::all_gather_object(make_object(c, rank), group);
      },
      harness::test_options(g.sim_seed));
  for (const int r : g.members) {
    RC_ASSERT(results[r].size() == g.members.size());
    for (size_t k = 0; k < g.members.size(); ++k) {
      RC_ASSERT(same_object(results[r][k], make_object(c, g.members[k])));
    }
  }
}

HARNESS_PROP(GatherObject, DstGetsEveryMembersObjectOthersNothing, ()) {
  const cases::TensorCase g = *cases::group_case();
  const int dst = cases::global_root(g);
  const ObjectCase c = *object_case();
  const auto results = harness::collect_ranks<std::optional<std::vector<c10::IValue>>>(
      g.world_size,
      [&](int rank) -> std::optional<std::vector<c10::IValue>> {
        const dist::GroupPtr group = cases::group_of(g);
        if (!cases::is_member(g, rank)) return std::nullopt;
        return dist::gather_object(make_object(c, rank), dst, group);
      },
      harness::test_options(g.sim_seed));
  for (const int r : g.members) {
    if (r != dst) {
      RC_ASSERT(!results[r].has_value());
      continue;
    }
    RC_ASSERT(results[r].has_value());
    RC_ASSERT(results[r]->size() == g.members.size());
    for (size_t k = 0; k < g.members.size(); ++k) {
      RC_ASSERT(same_object((*results[r])[k], make_object(c, g.members[k])));
    }
  }
}

HARNESS_PROP(BroadcastObjectList, EveryMemberGetsTheSourcesListOthersKeepTheirs, ()) {
  const cases::TensorCase g = *cases::group_case();
  const int src = cases::global_root(g);
  const ObjectCase c = *object_case();
  // Lists of different lengths before the call: the source's replaces them.
  auto list_before = [](int rank) { return std::vector<c10::IValue>(rank % 3, c10::IValue(rank)); };
  const auto results = harness::collect_ranks<std::vector<c10::IValue>>(
      g.world_size,
      [&](int rank) {
        const dist::GroupPtr group = cases::group_of(g);
        std::vector<c10::IValue> list = list_before(rank);
        if (rank == src) list = {make_object(c, rank), c10::IValue(), c10::IValue("x")};
        if (cases::is_member(g, rank)) dist::broadcast_object_list(list, src, group);
        return list;
      },
      harness::test_options(g.sim_seed));
  const std::vector<c10::IValue> from_src = {make_object(c, src), c10::IValue(), c10::IValue("x")};
  for (int r = 0; r < g.world_size; ++r) {
    const auto expected = cases::is_member(g, r) ? from_src : list_before(r);
    RC_ASSERT(results[r].size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) RC_ASSERT(same_object(results[r][i], expected[i]));
  }
}

// An object whose pickle is over the limit is refused on every rank, naming
// the rank that declared it, before any frame is sized by it.
TEST(ObjectLimits, AnObjectOverTheLimitIsMalformedInputOnEveryRankNamingIt) {
  const int world = harness::max_world_size(3);
  ASSERT_GE(world, 2);
  setenv("DIST_ENGINE_MAX_OBJECT_BYTES", "2000", 1);
  const auto errors = harness::collect_ranks<std::string>(world, [&](int rank) -> std::string {
    const std::string text(rank == world - 1 ? 5000 : 10, 'x');
    try {
      dist::all_gather_object(c10::IValue(text));
    } catch (const dist::MalformedInput& error) {
      return error.what();
    }
    return "no error";
  });
  unsetenv("DIST_ENGINE_MAX_OBJECT_BYTES");
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_NE(errors[rank].find("the object of rank " + std::to_string(world - 1) + " declares"),
              std::string::npos)
        << errors[rank];
    EXPECT_NE(errors[rank].find("objects take 0 to 2000 (DIST_ENGINE_MAX_OBJECT_BYTES)"),
              std::string::npos)
        << errors[rank];
  }
}

TEST(ObjectLimits, ALimitThatIsNotAPositiveIntegerIsRefused) {
  EXPECT_EQ(dist::max_object_bytes(), int64_t{1} << 32);
  for (const char* bad : {"0", "-5", "4k", ""}) {
    setenv("DIST_ENGINE_MAX_OBJECT_BYTES", bad, 1);
    EXPECT_THROW(dist::max_object_bytes(), dist::InvalidArgument) << bad;
  }
  unsetenv("DIST_ENGINE_MAX_OBJECT_BYTES");
}
