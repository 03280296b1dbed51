#include "engine/dist/objects.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/dist/collectives.h"
#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/dist/pickle.h"

namespace engine::dist {
namespace {

// `bytes`, declared by `what`, checked against the limit before anything is
// sized by it.
void check_declared(int64_t bytes, const std::string& what) {
  const int64_t limit = max_object_bytes();
  if (bytes >= 0 && bytes <= limit) return;
  throw MalformedInput(on_rank(
      get_rank(), what + " declares " + std::to_string(bytes) + " bytes; objects take 0 to " +
                      std::to_string(limit) + " (DIST_ENGINE_MAX_OBJECT_BYTES)"));
}

// Every rank's buffer padded to the longest one: collectives move equal shapes.
// The first 8 bytes carry the real length. Frames travel on the group's
// communication device (a GPU for nccl), as mmengine's object collectives do.
at::Tensor framed(const c10::IValue& data, const GroupPtr& group) {
  const at::Device device = get_comm_device(group);
  const at::Tensor payload = pickle(data);
  const at::Tensor mine =
      at::full({1}, payload.numel(), at::TensorOptions(at::kLong).device(device));
  const at::Tensor lengths = at::cat(all_gather(mine, group)).cpu();
  int64_t longest = 0;
  for (int64_t r = 0; r < lengths.numel(); ++r) {
    const int64_t bytes = lengths.data_ptr<int64_t>()[r];
    check_declared(bytes, "the object of rank " + std::to_string(r));
    longest = std::max(longest, bytes);
  }
  at::Tensor frame = at::zeros({8 + longest}, at::kByte);
  const int64_t length = payload.numel();
  std::memcpy(frame.data_ptr(), &length, 8);
  frame.narrow(0, 8, length).copy_(payload);
  return frame.to(device);
}

c10::IValue unframe(const at::Tensor& frame_on_device, int rank) {
  const at::Tensor frame = frame_on_device.cpu();
  const std::string what = "the object of rank " + std::to_string(rank);
  int64_t length = 0;
  std::memcpy(&length, frame.data_ptr(), 8);
  if (length < 0 || length > frame.numel() - 8) {
    throw MalformedInput(on_rank(get_rank(), what + " declares " + std::to_string(length) +
                                                 " bytes in a frame of " +
                                                 std::to_string(frame.numel() - 8)));
  }
  return unpickle(frame.narrow(0, 8, length), on_rank(get_rank(), what));
}

std::vector<c10::IValue> unframe_all(const std::vector<at::Tensor>& frames) {
  std::vector<c10::IValue> out;
  for (size_t r = 0; r < frames.size(); ++r) out.push_back(unframe(frames[r], static_cast<int>(r)));
  return out;
}

}  // namespace

int64_t max_object_bytes() {
  const char* text = std::getenv("DIST_ENGINE_MAX_OBJECT_BYTES");
  if (text == nullptr) return int64_t{1} << 32;
  int64_t value = 0;
  const char* end = text + std::strlen(text);
  const auto [stop, error] = std::from_chars(text, end, value);
  if (error != std::errc() || stop != end || value <= 0) {
    throw InvalidArgument(on_rank(get_rank(),
                                  "DIST_ENGINE_MAX_OBJECT_BYTES must be a positive "
                                  "integer, not \"" +
                                      std::string(text) + "\""));
  }
  return value;
}

std::vector<c10::IValue> all_gather_object(const c10::IValue& data, const GroupPtr& group) {
  if (get_world_size(group) == 1) return {data};
  return unframe_all(all_gather(framed(data, group), group));
}

std::optional<std::vector<c10::IValue>> gather_object(const c10::IValue& data, int dst,
                                                      const GroupPtr& group) {
  if (get_world_size(group) == 1) return std::vector<c10::IValue>{data};
  root_in_group(dst, group, "gather_object", "dst");
  const std::vector<at::Tensor> frames = gather(framed(data, group), dst, group);
  if (frames.empty()) return std::nullopt;
  return unframe_all(frames);
}

void broadcast_object_list(std::vector<c10::IValue>& data, int src, const GroupPtr& group) {
  if (get_world_size(group) == 1) return;
  root_in_group(src, group, "broadcast_object_list", "src");
  const bool is_src = get_rank() == src;
  at::Tensor payload;
  if (is_src) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (const auto& value : data) list.push_back(value);
    payload = pickle(list);
  }
  const at::Device device = get_comm_device(group);
  at::Tensor length =
      at::full({1}, is_src ? payload.numel() : 0, at::TensorOptions(at::kLong).device(device));
  broadcast(length, src, group);
  const int64_t bytes = length.item<int64_t>();  // one copy from the device
  check_declared(bytes, "the object list of rank " + std::to_string(src));
  const std::string what = on_rank(get_rank(), "the object list of rank " + std::to_string(src));
  payload =
      is_src ? payload.to(device) : at::empty({bytes}, at::TensorOptions(at::kByte).device(device));
  broadcast(payload, src, group);
  if (is_src) return;
  const c10::IValue list = unpickle(payload.cpu(), what);
  if (!list.isList()) throw MalformedInput(what + " is " + list.tagKind() + ", not a list");
  data.assign(list.toListRef().begin(), list.toListRef().end());
}

}  // namespace engine::dist
