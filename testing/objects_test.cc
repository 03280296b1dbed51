// Object collectives move any IValue (through LibTorch's pickler) exactly.
#include <ATen/ATen.h>
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

HARNESS_PROP(AllGatherObject, EveryRankGetsEveryObjectInRankOrder, ()) {
  const int n = *rc::gen::inRange(1, 9);
  const ObjectCase c = *object_case();
  const auto results = harness::collect_ranks<std::vector<c10::IValue>>(
      n, [&](int rank) { return dist::all_gather_object(make_object(c, rank)); },
      harness::test_options(*rc::gen::arbitrary<uint32_t>()));
  for (const auto& list : results) {
    RC_ASSERT(static_cast<int>(list.size()) == n);
    for (int r = 0; r < n; ++r) RC_ASSERT(same_object(list[r], make_object(c, r)));
  }
}

HARNESS_PROP(GatherObject, DstGetsEveryObjectOthersNothing, ()) {
  const int n = *rc::gen::inRange(1, 9);
  const int dst = *rc::gen::inRange(0, n);
  const ObjectCase c = *object_case();
  const auto results = harness::collect_ranks<std::optional<std::vector<c10::IValue>>>(
      n, [&](int rank) { return dist::gather_object(make_object(c, rank), dst); },
      harness::test_options(*rc::gen::arbitrary<uint32_t>()));
  for (int r = 0; r < n; ++r) {
    if (r != dst && n > 1) {
      RC_ASSERT(!results[r].has_value());
      continue;
    }
    RC_ASSERT(results[r].has_value());
    for (int s = 0; s < n; ++s) RC_ASSERT(same_object((*results[r])[s], make_object(c, s)));
  }
}

HARNESS_PROP(BroadcastObjectList, EveryRankGetsTheSourcesList, ()) {
  const int n = *rc::gen::inRange(1, 9);
  const int src = *rc::gen::inRange(0, n);
  const ObjectCase c = *object_case();
  const auto results = harness::collect_ranks<std::vector<c10::IValue>>(
      n,
      [&](int rank) {
        // Lists of different lengths: the source's replaces them all.
        std::vector<c10::IValue> list(rank % 3, c10::IValue(rank));
        if (rank == src) list = {make_object(c, rank), c10::IValue(), c10::IValue("x")};
        dist::broadcast_object_list(list, src);
        return list;
      },
      harness::test_options(*rc::gen::arbitrary<uint32_t>()));
  const std::vector<c10::IValue> expected = {make_object(c, src), c10::IValue(), c10::IValue("x")};
  for (const auto& list : results) {
    RC_ASSERT(list.size() == expected.size());
    for (size_t i = 0; i < list.size(); ++i) RC_ASSERT(same_object(list[i], expected[i]));
  }
}
