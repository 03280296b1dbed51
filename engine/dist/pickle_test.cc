#include "engine/dist/pickle.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <vector>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

void expect_same_tensor(const at::Tensor& got, const at::Tensor& want) {
  EXPECT_EQ(got.sizes(), want.sizes());
  EXPECT_EQ(got.strides(), want.strides());
  EXPECT_EQ(got.scalar_type(), want.scalar_type());
  EXPECT_TRUE(at::equal(got, want));
}

// Empty views at a storage offset, as slicing and striding make them.
std::vector<at::Tensor> empty_views() {
  const at::Tensor base = at::arange(12, at::kLong);
  return {base.slice(0, 5, 5),                                // [0] at offset 5
          at::empty({0}, at::kLong).as_strided({0}, {2}, 1),  // past an empty storage
          base.view({3, 4}).slice(1, 2, 2),                   // [3, 0], strided
          at::empty({0, 4}, at::kFloat).as_strided({0, 2}, {4, 2}, 1)};
}

TEST(Pickle, EmptyViewsAtAnOffsetComeBackWithTheirShapeStridesAndDtype) {
  for (const at::Tensor& view : empty_views()) {
    ASSERT_NE(view.storage_offset(), 0);
    expect_same_tensor(unpickle(pickle(view), "the view").toTensor(), view);
  }
}

TEST(Pickle, NestedEmptyViewsComeBackInsideTheirContainers) {
  const std::vector<at::Tensor> views = empty_views();
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("list", c10::List<at::Tensor>(views));
  dict.insert("tuple", c10::ivalue::Tuple::create({views[0], at::ones({2}), 3}));
  const c10::IValue back = unpickle(pickle(dict), "the dict");
  const c10::impl::GenericDict got = back.toGenericDict();
  const auto list = got.at("list").toTensorVector();
  ASSERT_EQ(list.size(), views.size());
  for (size_t i = 0; i < views.size(); ++i) expect_same_tensor(list[i], views[i]);
  const auto& tuple = got.at("tuple").toTupleRef().elements();
  expect_same_tensor(tuple[0].toTensor(), views[0]);
  expect_same_tensor(tuple[1].toTensor(), at::ones({2}));
  EXPECT_EQ(tuple[2].toInt(), 3);
}

// The pickler writes a tensor's whole storage: a contiguous view of a few
// elements of a large one would carry all of it.
TEST(Pickle, AContiguousViewTravelsAsItsOwnElements) {
  const at::Tensor base = at::arange(1 << 16, at::kDouble);  // 512 KiB
  const at::Tensor view = base.slice(0, 100, 110);
  const at::Tensor bytes = pickle(view);
  EXPECT_LT(bytes.numel(), 4096);
  const at::Tensor back = unpickle(bytes, "the view").toTensor();
  expect_same_tensor(back, view);
  EXPECT_EQ(back.storage_offset(), 0);
}

// Views of one storage in one value each come back with their own values;
// one tensor met twice comes back as one.
TEST(Pickle, ViewsOfOneStorageComeBackEachWithItsValuesAndTiesStayTied) {
  const at::Tensor base = at::arange(8, at::kLong);
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("low", base.slice(0, 0, 4));
  dict.insert("high", base.slice(0, 4, 8));
  dict.insert("high again", dict.at("high"));
  const c10::impl::GenericDict got = unpickle(pickle(dict), "the dict").toGenericDict();
  expect_same_tensor(got.at("low").toTensor(), base.slice(0, 0, 4));
  expect_same_tensor(got.at("high").toTensor(), base.slice(0, 4, 8));
  EXPECT_TRUE(got.at("high").toTensor().is_same(got.at("high again").toTensor()));
}

TEST(Pickle, AStridedViewKeepsItsViewOfTheStorage) {
  const at::Tensor base = at::arange(12, at::kDouble);
  const at::Tensor view = base.slice(0, 3, 9, 2);
  const at::Tensor back = unpickle(pickle(view), "the view").toTensor();
  expect_same_tensor(back, view);
  EXPECT_EQ(back.storage_offset(), view.storage_offset());
}

TEST(Pickle, BytesThatAreNoPickleAreMalformedInputNamingWhatTheyWere) {
  try {
    unpickle(at::arange(16, at::kByte), "the object of rank 3");
    FAIL() << "no error";
  } catch (const MalformedInput& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "the object of rank 3 is not a readable torch.save archive (16 bytes)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace engine::dist
