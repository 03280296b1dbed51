#include "engine/dist/node_shared.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <cstring>
#include <vector>

#include "engine/dist/collectives.h"
#include "engine/dist/info.h"
#include "engine/dist/shm/node_shared_buffers.h"
#include "engine/dist/shm/segment.h"

namespace engine::dist {
namespace {

// The group's collectives, for making segments.
shm::SegmentCollectives collectives_of(const GroupPtr& group) {
  auto all_gather_names = [group](const std::vector<char>& mine) {
    const auto bytes = static_cast<int64_t>(mine.size());
    at::Tensor name = at::empty({bytes}, at::kByte);
    std::memcpy(name.data_ptr(), mine.data(), mine.size());
    at::Tensor all = at::empty({group->size() * bytes}, at::kByte);
    all_gather_into_tensor(all, name, group);
    const auto* first = reinterpret_cast<const char*>(all.data_ptr<uint8_t>());
    return std::vector<char>(first, first + all.numel());
  };
  auto all_true = [group](bool mine) {
    at::Tensor flag = at::full({1}, mine ? 1 : 0, at::kInt);
    all_reduce(flag, "min", group);
    return flag.item<int>() == 1;
  };
  return {all_gather_names, all_true};
}

}  // namespace

bool is_node_shared(const at::Tensor& t) { return shm::is_node_shared(t); }

at::Tensor zeros_node_shared(int64_t numel, c10::ScalarType dtype, const GroupPtr& group) {
  const GroupPtr g = group ? group : get_default_group();
  auto ordinary = [&] { return at::zeros({numel}, at::TensorOptions().dtype(dtype)); };
  if (numel == 0 || !g || g->size() == 1 || !g->is_member() || !g->backend().node_shared_wait()) {
    return ordinary();
  }
  at::Tensor shared = shm::zeros_in_shared_memory(numel, dtype, g->rank(), g->global_ranks(),
                                                  g->backend(), collectives_of(g));
  return shared.defined() ? shared : ordinary();
}

}  // namespace engine::dist
