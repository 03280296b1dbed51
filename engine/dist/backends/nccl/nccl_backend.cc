#include "engine/dist/backends/nccl/nccl_backend.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/utils/tensor_flatten.h>

#include <cstring>

#include "engine/dist/backend_registry.h"
#include "engine/dist/backends/nccl/nccl_types.h"
#include "engine/dist/backends/nccl/nccl_work.h"
#include "engine/dist/backends/store/tcp_store.h"
#include "engine/dist/errors.h"

namespace engine::dist::nccl {
namespace {

size_t count_of(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

std::shared_ptr<Backend> create(const BackendOptions& options) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    throw DistError(on_rank(options.rank,
                            "the nccl backend needs a CUDA device and this machine has none "
                            "(or no driver): use gloo or mpi on CPU"));
  }
  // As mmengine's init_dist (torch.cuda.set_device(local_rank % gpus)): one
  // GPU per local rank, so ranks on one node never share a device.
  const int device = options.local_rank % devices;
  check(cudaSetDevice(device), "cudaSetDevice", options.rank);
  auto store = make_tcp_store(options, "nccl");
  ncclUniqueId id;
  const std::string key = "engine_nccl_id";
  if (options.rank == 0) {
    check(ncclGetUniqueId(&id), "ncclGetUniqueId", options.rank);
    store->set(key, std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id),
                                         reinterpret_cast<uint8_t*>(&id) + sizeof(id)));
  } else {
    const std::vector<uint8_t> bytes = store->get(key);
    if (bytes.size() != sizeof(id))
      throw DistError(on_rank(options.rank, "the nccl id in the store is corrupt"));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  ncclComm_t comm;
  check(ncclCommInitRank(&comm, options.world_size, id, options.rank), "ncclCommInitRank",
        options.rank);
  return std::make_shared<NcclBackend>(comm, device, options.timeout, options.rank);
}

const BackendRegistration registration("nccl", create);

}  // namespace

NcclBackend::NcclBackend(ncclComm_t comm, int device, std::chrono::milliseconds timeout,
                         int world_rank)
    : comm_(comm), device_(device), world_rank_(world_rank), timeout_(timeout) {
  ncclCommUserRank(comm_, &rank_);
  ncclCommCount(comm_, &size_);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate",
        world_rank_);
}

NcclBackend::~NcclBackend() {
  ncclCommDestroy(comm_);
  cudaStreamDestroy(stream_);
}

void NcclBackend::admit(const at::Tensor& t) const {
  if (!t.is_cuda()) {
    throw InvalidArgument(
        on_rank(world_rank_, "the nccl backend moves CUDA tensors only, got one on " +
                                 t.device().str() + ": move it to the GPU or use gloo"));
  }
  // c10's guard for CUDA hands out the caller's current stream and events on
  // it (a CUDA event behind the void*) without linking c10_cuda, which
  // Debian's CPU-only LibTorch lacks.
  const auto* cuda = c10::impl::getDeviceGuardImpl(c10::kCUDA);
  const auto index = static_cast<c10::DeviceIndex>(device_);
  void* event = nullptr;
  cuda->record(&event, cuda->getStream(c10::Device(c10::kCUDA, index)), index,
               c10::EventFlag::PYTORCH_DEFAULT);
  const cudaError_t waited = cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(event), 0);
  cuda->destroyEvent(event, index);
  check(waited, "cudaStreamWaitEvent", world_rank_);
}

WorkPtr NcclBackend::enqueued(const char* what, std::vector<at::Tensor> keep_alive) const {
  cudaEvent_t event;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate", world_rank_);
  check(cudaEventRecord(event, stream_), "cudaEventRecord", world_rank_);
  return std::make_shared<NcclWork>(event, std::move(keep_alive), what, world_rank_, timeout_);
}

WorkPtr NcclBackend::all_reduce(at::Tensor& t, ReduceOp op) {
  admit(t);
  check(ncclAllReduce(t.data_ptr(), t.data_ptr(), count_of(t),
                      datatype_of(t.scalar_type(), world_rank_),
                      op_of(t.scalar_type(), op, world_rank_), comm_, stream_),
        "all_reduce", world_rank_);
  return enqueued("all_reduce", {t});
}

WorkPtr NcclBackend::broadcast(at::Tensor& t, int root) {
  admit(t);
  check(ncclBroadcast(t.data_ptr(), t.data_ptr(), count_of(t),
                      datatype_of(t.scalar_type(), world_rank_), root, comm_, stream_),
        "broadcast", world_rank_);
  return enqueued("broadcast", {t});
}

WorkPtr NcclBackend::reduce(at::Tensor& t, int root, ReduceOp op) {
  admit(t);
  // The result lands on the root only; other ranks' tensors are only read.
  check(
      ncclReduce(t.data_ptr(), t.data_ptr(), count_of(t), datatype_of(t.scalar_type(), world_rank_),
                 op_of(t.scalar_type(), op, world_rank_), root, comm_, stream_),
      "reduce", world_rank_);
  return enqueued("reduce", {t});
}

WorkPtr NcclBackend::all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  admit(input);
  const auto type = datatype_of(input.scalar_type(), world_rank_);
  check(ncclGroupStart(), "group", world_rank_);
  for (int r = 0; r < size_; ++r) {
    check(ncclSend(input.data_ptr(), count_of(input), type, r, comm_, stream_), "all_gather",
          world_rank_);
    check(ncclRecv(outputs[r].data_ptr(), count_of(input), type, r, comm_, stream_), "all_gather",
          world_rank_);
  }
  check(ncclGroupEnd(), "all_gather", world_rank_);
  std::vector<at::Tensor> keep = outputs;
  keep.push_back(input);
  return enqueued("all_gather", keep);
}

WorkPtr NcclBackend::gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) {
  admit(input);
  const auto type = datatype_of(input.scalar_type(), world_rank_);
  check(ncclGroupStart(), "group", world_rank_);
  check(ncclSend(input.data_ptr(), count_of(input), type, root, comm_, stream_), "gather",
        world_rank_);
  for (int r = 0; rank_ == root && r < size_; ++r) {
    check(ncclRecv(outputs[r].data_ptr(), count_of(input), type, r, comm_, stream_), "gather",
          world_rank_);
  }
  check(ncclGroupEnd(), "gather", world_rank_);
  std::vector<at::Tensor> keep = outputs;
  keep.push_back(input);
  return enqueued("gather", keep);
}

WorkPtr NcclBackend::scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) {
  admit(output);
  const auto type = datatype_of(output.scalar_type(), world_rank_);
  check(ncclGroupStart(), "group", world_rank_);
  for (int r = 0; rank_ == root && r < size_; ++r) {
    check(ncclSend(inputs[r].data_ptr(), count_of(output), type, r, comm_, stream_), "scatter",
          world_rank_);
  }
  check(ncclRecv(output.data_ptr(), count_of(output), type, root, comm_, stream_), "scatter",
        world_rank_);
  check(ncclGroupEnd(), "scatter", world_rank_);
  std::vector<at::Tensor> keep = inputs;
  keep.push_back(output);
  return enqueued("scatter", keep);
}

WorkPtr NcclBackend::reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                    ReduceOp op) {
  return reduce_scatter_tensor(output, torch::utils::flatten_dense_tensors(inputs), op);
}

WorkPtr NcclBackend::reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input,
                                           ReduceOp op) {
  // NCCL reads the input as it writes: only its own in-place layout, the
  // output at block `rank`, may overlap it.
  const bool in_place =
      output.data_ptr() == static_cast<char*>(input.data_ptr()) + rank_ * output.nbytes();
  const bool apart = at::get_overlap_status(output, input) == at::MemOverlapStatus::No;
  const at::Tensor source = in_place || apart ? input : input.clone();
  admit(output);
  admit(source);  // after the clone, which runs on the current stream
  check(ncclReduceScatter(source.data_ptr(), output.data_ptr(), count_of(output),
                          datatype_of(output.scalar_type(), world_rank_),
                          op_of(output.scalar_type(), op, world_rank_), comm_, stream_),
        "reduce_scatter", world_rank_);
  return enqueued("reduce_scatter", {source, output});
}

WorkPtr NcclBackend::all_to_all(std::vector<at::Tensor>& outputs,
                                const std::vector<at::Tensor>& inputs) {
  admit(inputs.at(0));
  const auto type = datatype_of(inputs[0].scalar_type(), world_rank_);
  check(ncclGroupStart(), "group", world_rank_);
  for (int r = 0; r < size_; ++r) {
    check(ncclSend(inputs[r].data_ptr(), count_of(inputs[r]), type, r, comm_, stream_),
          "all_to_all", world_rank_);
    check(ncclRecv(outputs[r].data_ptr(), count_of(outputs[r]), type, r, comm_, stream_),
          "all_to_all", world_rank_);
  }
  check(ncclGroupEnd(), "all_to_all", world_rank_);
  std::vector<at::Tensor> keep = inputs;
  keep.insert(keep.end(), outputs.begin(), outputs.end());
  return enqueued("all_to_all", keep);
}

WorkPtr NcclBackend::barrier() {
  // One float through all_reduce on this device: NCCL has no barrier.
  at::Tensor token = at::zeros({1}, at::TensorOptions().device(at::kCUDA, device_));
  return all_reduce(token, ReduceOp::kSum);
}

WorkPtr NcclBackend::send(const at::Tensor& t, int dst, int) {
  admit(t);
  check(ncclSend(t.data_ptr(), count_of(t), datatype_of(t.scalar_type(), world_rank_), dst, comm_,
                 stream_),
        "send", world_rank_);
  return enqueued("send", {t});
}

WorkPtr NcclBackend::recv(at::Tensor& t, int src, int) {
  admit(t);
  check(ncclRecv(t.data_ptr(), count_of(t), datatype_of(t.scalar_type(), world_rank_), src, comm_,
                 stream_),
        "recv", world_rank_);
  return enqueued("recv", {t});
}

std::shared_ptr<Backend> NcclBackend::split(const std::vector<int>& ranks) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  const bool member = me != ranks.end();
  ncclComm_t comm = nullptr;
  check(ncclCommSplit(comm_, member ? 0 : NCCL_SPLIT_NOCOLOR,
                      member ? static_cast<int>(me - ranks.begin()) : 0, &comm, nullptr),
        "new_group (ncclCommSplit)", world_rank_);
  if (!member) return nullptr;
  return std::make_shared<NcclBackend>(comm, device_, timeout_, world_rank_);
}

}  // namespace engine::dist::nccl
