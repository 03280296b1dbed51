// get_device, get_data_device and cast_data_device against mmengine's
// semantics (FACTS.md). No CUDA here: the meta device stands in for a second
// device, since moving a tensor there is a real device change.
#include "engine/device/device.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <string>

#include "engine/device/data_device.h"
#include "engine/dist/errors.h"

namespace engine::device {
namespace {

const at::Device kCpu(at::kCPU);
const at::Device kMeta(at::kMeta);

// {"image": [t, t], "meta": ({"scale": t},)}: every container kind nested.
c10::IValue nested_batch(at::Device device) {
  const auto options = at::TensorOptions().device(device);
  c10::impl::GenericList images(c10::TensorType::get());
  images.push_back(at::ones({2, 3}, options));
  images.push_back(at::zeros({1}, options));
  c10::Dict<std::string, at::Tensor> scale;
  scale.insert("scale", at::full({1}, 0.5, options));
  c10::impl::GenericDict batch(c10::StringType::get(), c10::AnyType::get());
  batch.insert("image", images);
  batch.insert("meta", c10::ivalue::Tuple::create({c10::IValue(scale)}));
  return batch;
}

void expect_refused(const std::function<void()>& call, const std::string& expected) {
  try {
    call();
    FAIL() << "no error; expected one saying " << expected;
  } catch (const dist::InvalidArgument& error) {
    const std::string what = error.what();
    EXPECT_EQ(what.rfind("[rank 0] ", 0), 0u) << what;
    EXPECT_NE(what.find(expected), std::string::npos) << what;
  }
}

TEST(Device, GetDeviceNamesCudaOnlyWhereItExists) {
  EXPECT_EQ(get_device(), at::hasCUDA() ? "cuda" : "cpu");
  EXPECT_EQ(is_cuda_available(), at::hasCUDA());
  EXPECT_EQ(get_comm_device(), kCpu);  // not initialised: a single CPU process
}

TEST(DataDevice, FoundThroughEveryContainerKind) {
  EXPECT_EQ(get_data_device(at::ones({2}, at::device(kMeta))), kMeta);
  EXPECT_EQ(get_data_device(nested_batch(kCpu)), kCpu);
  EXPECT_EQ(get_data_device(nested_batch(kMeta)), kMeta);
  EXPECT_EQ(get_data_device(std::vector<at::Tensor>{at::ones({1}, at::device(kMeta))}), kMeta);
  EXPECT_EQ(get_data_device(std::map<std::string, at::Tensor>{{"x", at::ones({1})}}), kCpu);
}

TEST(DataDevice, TwoDevicesAreNamed) {
  const std::vector<at::Tensor> mixed{at::ones({1}), at::ones({1}, at::device(kMeta))};
  expect_refused([&] { get_data_device(mixed); }, "different devices, cpu and meta");
  c10::impl::GenericList deep(c10::AnyType::get());
  deep.push_back(nested_batch(kMeta));
  deep.push_back(nested_batch(kCpu));
  expect_refused([&] { get_data_device(deep); }, "different devices, meta and cpu");
}

TEST(DataDevice, EmptyContainersAtAnyDepthAreRefused) {
  expect_refused([] { get_data_device(std::vector<at::Tensor>{}); }, "empty");
  expect_refused([] { cast_data_device(std::map<std::string, at::Tensor>{}, kCpu); }, "empty");
  c10::impl::GenericDict holds_empty(c10::StringType::get(), c10::AnyType::get());
  holds_empty.insert("x", c10::impl::GenericList(c10::TensorType::get()));
  expect_refused([&] { get_data_device(holds_empty); }, "empty GenericList");
  expect_refused([&] { cast_data_device(holds_empty, kCpu); }, "empty GenericList");
}

TEST(DataDevice, AnythingButTensorsAndContainersIsRefused) {
  expect_refused([] { get_data_device(c10::IValue("images")); }, "got String");
  expect_refused([] { cast_data_device(c10::IValue(3), kCpu); }, "got Int");
  c10::impl::GenericList with_number(c10::AnyType::get());
  with_number.push_back(at::ones({1}));
  with_number.push_back(2.5);
  expect_refused([&] { get_data_device(with_number); }, "got Double");
}

TEST(CastDataDevice, ATensorAlreadyThereIsNotCopied) {
  const at::Tensor tensor = at::arange(4);
  EXPECT_TRUE(cast_data_device(tensor, kCpu).is_same(tensor));
  const c10::IValue batch = nested_batch(kCpu);
  const c10::IValue cast = cast_data_device(batch, kCpu);
  const auto images = batch.toGenericDict().at("image").toListRef();
  const auto cast_images = cast.toGenericDict().at("image").toListRef();
  for (size_t i = 0; i < images.size(); ++i) {
    EXPECT_TRUE(cast_images[i].toTensor().is_same(images[i].toTensor()));
  }
}

TEST(CastDataDevice, EveryTensorMovesAndTheStructureStays) {
  const c10::IValue cast = cast_data_device(nested_batch(kCpu), kMeta);
  EXPECT_EQ(get_data_device(cast), kMeta);
  const c10::impl::GenericDict dict = cast.toGenericDict();
  EXPECT_TRUE(dict.keyType()->isSubtypeOf(*c10::StringType::get()));
  const auto images = dict.at("image").toList();
  ASSERT_EQ(images.size(), 2u);
  EXPECT_TRUE(images.elementType()->isSubtypeOf(*c10::TensorType::get()));
  EXPECT_EQ(images.get(0).toTensor().sizes(), at::IntArrayRef({2, 3}));
  const auto meta = dict.at("meta");
  ASSERT_TRUE(meta.isTuple());
  EXPECT_EQ(meta.toTupleRef().elements()[0].toGenericDict().at("scale").toTensor().device(), kMeta);

  const auto moved = cast_data_device(std::vector<at::Tensor>{at::ones({3}), at::ones({1})}, kMeta);
  ASSERT_EQ(moved.size(), 2u);
  EXPECT_EQ(moved[1].device(), kMeta);
}

TEST(CastDataDevice, OutIsWrittenInPlace) {
  const std::map<std::string, at::Tensor> data{{"a", at::arange(3)}, {"b", at::full({2}, 7)}};
  std::map<std::string, at::Tensor> out{{"a", at::zeros({3}, at::kLong)},
                                        {"b", at::zeros({2}, at::kLong)}};
  const at::Tensor out_a = out["a"];
  const auto result = cast_data_device(data, kCpu, out);
  EXPECT_TRUE(at::equal(out_a, data.at("a")));
  EXPECT_TRUE(at::equal(out.at("b"), data.at("b")));
  EXPECT_TRUE(result.at("a").is_same(data.at("a")));

  const c10::IValue batch = nested_batch(kCpu), target = nested_batch(kCpu);
  target.toGenericDict().at("image").toListRef()[0].toTensor().zero_();
  cast_data_device(batch, kCpu, target);
  EXPECT_TRUE(
      at::equal(target.toGenericDict().at("image").toListRef()[0].toTensor(), at::ones({2, 3})));
}

TEST(CastDataDevice, OutOfAnotherStructureIsRefused) {
  const std::vector<at::Tensor> two{at::ones({1}), at::ones({1})};
  const std::vector<at::Tensor> three{at::ones({1}), at::ones({1}), at::ones({1})};
  expect_refused([&] { cast_data_device(two, kCpu, three); },
                 "GenericList of 2 and out GenericList of 3");
  const std::map<std::string, at::Tensor> data{{"a", at::ones({1})}};
  const std::map<std::string, at::Tensor> other_key{{"b", at::ones({1})}};
  expect_refused([&] { cast_data_device(data, kCpu, other_key); }, "out has no key a");
  expect_refused([&] { cast_data_device(nested_batch(kCpu), kCpu, c10::IValue(at::ones({1}))); },
                 "got data GenericDict of 2 and out Tensor");
}

}  // namespace
}  // namespace engine::device
