#include "engine/dist/backends/mpi/mpi_backend.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/utils/tensor_flatten.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "engine/dist/backend_registry.h"
#include "engine/dist/backends/mpi/mpi_types.h"
#include "engine/dist/backends/mpi/mpi_work.h"
#include "engine/dist/backends/mpi/staged_collectives.h"
#include "engine/dist/errors.h"
#include "engine/dist/reduce_kernel.h"

namespace engine::dist::mpi {
namespace {

void* data(const at::Tensor& t) { return t.numel() ? t.data_ptr() : nullptr; }

// The 1-D tensor that `list` tiles end to end in one storage, or an undefined
// one. The API's list outputs are views of one buffer (empty_list), so MPI can
// move them in place instead of through a packed copy.
at::Tensor span_of(const std::vector<at::Tensor>& list) {
  if (list.empty()) return {};
  const at::Tensor& first = list.front();
  int64_t total = 0;
  for (const auto& t : list) {
    if (!t.is_contiguous() || t.scalar_type() != first.scalar_type() ||
        !t.storage().is_alias_of(first.storage()) ||
        t.storage_offset() != first.storage_offset() + total) {
      return {};
    }
    total += t.numel();
  }
  return first.as_strided({total}, {1});
}

// MPI moves one buffer: lists travel packed end to end.
at::Tensor packed(const std::vector<at::Tensor>& list) {
  const at::Tensor span = span_of(list);
  return span.defined() ? span : torch::utils::flatten_dense_tensors(list);
}

// Whether a reduce_scatter's list can be read where it lies: one block a
// rank, each contiguous and of the output's dtype and size.
bool fit_blocks(const at::Tensor& output, const std::vector<at::Tensor>& blocks, int size) {
  return blocks.size() == static_cast<size_t>(size) &&
         std::all_of(blocks.begin(), blocks.end(), [&](const at::Tensor& block) {
           return block.is_contiguous() && block.scalar_type() == output.scalar_type() &&
                  block.numel() == output.numel();
         });
}

// Where a list output is received: in place when it is one span, else in a
// buffer that `unpack` copies out.
at::Tensor receive_buffer(const std::vector<at::Tensor>& outputs, int64_t count,
                          const at::TensorOptions& options) {
  const at::Tensor span = span_of(outputs);
  return span.defined() && span.numel() == count ? span : at::empty({count}, options);
}

bool is_span_of(const at::Tensor& buffer, const std::vector<at::Tensor>& outputs) {
  return !outputs.empty() && buffer.data_ptr() == outputs.front().data_ptr();
}

// Not unflatten_dense_tensors: LibTorch 1.13 gives an empty tensor's part
// the shape [0], which does not copy into a [0, 1] output.
void unpack(const at::Tensor& buffer, std::vector<at::Tensor>& outputs) {
  int64_t offset = 0;
  for (auto& output : outputs) {
    const int64_t count = output.numel();
    output.copy_(buffer.narrow(0, offset, count).view(output.sizes()));
    offset += count;
  }
}

// What to do once a list output has arrived in `buffer`: nothing when it
// arrived in place.
std::function<void()> unpacking(const at::Tensor& buffer, std::vector<at::Tensor>& outputs) {
  if (is_span_of(buffer, outputs)) return nullptr;
  return [buffer, outputs]() mutable { unpack(buffer, outputs); };
}

// Open MPI's libnbc picks a binomial tree (reduce, then broadcast) for every
// in-place MPI_Iallreduce and for fewer than 4 ranks, which is slower than
// its ring for large tensors and no faster for small ones. The ring is the
// default here; an OMPI_MCA_ value the user set wins.
void choose_nonblocking_algorithms() {
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "ring", /*overwrite=*/0);
}

void initialize_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  choose_nonblocking_algorithms();
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread", -1);
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
}

// Open MPI's mpi_yield_when_idle (read through the MPI tool interface): true
// when its progress loop yields the core in each idle round. False when this
// MPI has no such variable.
bool mpi_yields_when_idle() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return false;
  int index = 0;
  int verbosity = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_T_enum values;
  int bind = 0;
  int scope = 0;
  MPI_T_cvar_handle handle;
  int count = 0;
  bool as_bool = false;
  int as_int = 0;
  if (MPI_T_cvar_get_index("mpi_yield_when_idle", &index) == MPI_SUCCESS &&
      MPI_T_cvar_get_info(index, nullptr, nullptr, &verbosity, &type, &values, nullptr, nullptr,
                          &bind, &scope) == MPI_SUCCESS &&
      (type == MPI_C_BOOL || type == MPI_INT) &&
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
    MPI_T_cvar_read(handle, type == MPI_C_BOOL ? static_cast<void*>(&as_bool) : &as_int);
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return as_bool || as_int != 0;
}

std::shared_ptr<Backend> create(const BackendOptions& options) {
  initialize_mpi();
  MPI_Comm comm;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup", options.rank);
  const WaitPolicy policy{options.timeout, /*yield_between_tests=*/!mpi_yields_when_idle()};
  auto backend = std::make_shared<MpiBackend>(comm, policy, options.rank);
  if (backend->size() != options.world_size || backend->rank() != options.rank) {
    throw InvalidArgument(on_rank(
        backend->rank(), "the launch environment says rank " + std::to_string(options.rank) +
                             " of " + std::to_string(options.world_size) + " but MPI says rank " +
                             std::to_string(backend->rank()) + " of " +
                             std::to_string(backend->size()) + ": start the job with mpirun"));
  }
  return backend;
}

const BackendRegistration registration("mpi", create);

// all_gather as a direct exchange (see mpi_backend.h): on up to this many
// ranks, for blocks below this size.
constexpr int kMaxRanksForExchange = 8;
constexpr size_t kMaxBlockBytesForExchange = size_t{1} << 20;

// reduce_scatter and all_gather through the staging area (see
// staged_collectives.h): on up to this many ranks (the area holds 2 chunks per
// rank per rank), from this size of block (below it, the exchange's one
// round of messages wins).
constexpr int kMaxRanksForStaging = 16;
constexpr size_t kMinBlockBytesForStaging = size_t{256} << 10;

// Tags of the backend's own messages on exchange_comm_: a broadcast on one
// rank never matches an all_gather on another (a mismatch times out).
constexpr int kAllGatherTag = 0;
constexpr int kBroadcastTag = 1;
constexpr int kAllReduceTag = 2;
constexpr int kReduceScatterTag = 3;

// all_reduce as an exchange (see mpi_backend.h): every rank sends its whole
// tensor to each peer in one round, where libnbc's ring sends parts in
// several. The one round wins while a rank receives at most 64 KiB, except
// where the ring's parts are eager messages on Open MPI's shared memory
// (4 KiB, header included) and the exchange's whole tensor is not.
bool exchanges_all_reduce(int ranks, size_t bytes) {
  if (ranks > kMaxRanksForExchange) return false;
  constexpr size_t kEagerBytes = size_t{4} << 10;
  constexpr size_t kMaxReceivedBytes = size_t{64} << 10;
  return (bytes < kEagerBytes || bytes >= 2 * kEagerBytes) &&
         (ranks - 1) * bytes <= kMaxReceivedBytes;
}

// Every rank's result is block 0 (op) block 1 (op) ... in rank order, so
// that all ranks compute the same bits, in the simulator's order. `slots`
// holds the peers' blocks (rank r's at r); `mine` is this rank's block and
// receives the result. Rank 0 accumulates in place; the others in slot 0.
void reduce_in_rank_order(char* mine, char* slots, int64_t count, c10::ScalarType dtype,
                          ReduceOp op, int rank, int size) {
  const int64_t bytes = count * static_cast<int64_t>(c10::elementSize(dtype));
  char* accumulator = rank == 0 ? mine : slots;
  for (int r = 1; r < size; ++r) {
    reduce_into(accumulator, r == rank ? mine : slots + r * bytes, count, dtype, op);
  }
  if (accumulator != mine && bytes > 0) std::memcpy(mine, accumulator, bytes);
}

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm, WaitPolicy wait_policy, int world_rank)
    : comm_(comm), wait_policy_(wait_policy), world_rank_(world_rank) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  check(MPI_Comm_dup(comm_, &exchange_comm_), "MPI_Comm_dup", world_rank_);
}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm_free(&exchange_comm_);
  MPI_Comm_free(&comm_);
}

StagedCollectives* MpiBackend::staging_for(size_t block_bytes) {
  if (size_ < 2 || size_ > kMaxRanksForStaging || block_bytes < kMinBlockBytesForStaging) {
    return nullptr;
  }
  if (!staging_tried_) {
    staging_tried_ = true;
    staged_ = StagedCollectives::create(comm_, world_rank_);
  }
  return staged_.get();
}

int MpiBackend::count_of(const at::Tensor& t) const {
  if (t.numel() > std::numeric_limits<int>::max()) {
    throw InvalidArgument(on_rank(world_rank_,
                                  "the mpi backend moves at most 2^31-1 elements per call; "
                                  "split the tensor"));
  }
  return static_cast<int>(t.numel());
}

WorkPtr MpiBackend::started(MPI_Request request, const char* what, MpiWork::Tensors keep_alive,
                            std::function<void()> on_success) const {
  return std::make_shared<MpiWork>(MpiWork::Requests{request}, std::move(keep_alive),
                                   std::move(on_success), what, world_rank_, wait_policy_);
}

WorkPtr MpiBackend::all_reduce(at::Tensor& tensor, ReduceOp op) {
  if (can_reduce(tensor.scalar_type(), op) && exchanges_all_reduce(size_, tensor.nbytes())) {
    return exchanged_all_reduce(tensor, op);
  }
  const auto type = datatype_of(tensor.scalar_type(), world_rank_);
  const auto mpi_op = op_of(tensor.scalar_type(), op, world_rank_);
  MPI_Request request;
  check(MPI_Iallreduce(MPI_IN_PLACE, data(tensor), count_of(tensor), type, mpi_op, comm_, &request),
        "all_reduce", world_rank_);
  return started(request, "all_reduce", {tensor});
}

WorkPtr MpiBackend::broadcast(at::Tensor& tensor, int root) {
  const auto type = datatype_of(tensor.scalar_type(), world_rank_);
  MPI_Request request;
  if (size_ == 2) {
    // One message: libnbc's schedule around it only adds cost.
    const int peer = 1 - rank_;
    check(rank_ == root ? MPI_Isend(data(tensor), count_of(tensor), type, peer, kBroadcastTag,
                                    exchange_comm_, &request)
                        : MPI_Irecv(data(tensor), count_of(tensor), type, peer, kBroadcastTag,
                                    exchange_comm_, &request),
          "broadcast", world_rank_);
  } else {
    check(MPI_Ibcast(data(tensor), count_of(tensor), type, root, comm_, &request), "broadcast",
          world_rank_);
  }
  return started(request, "broadcast", {tensor});
}

WorkPtr MpiBackend::reduce(at::Tensor& tensor, int root, ReduceOp op) {
  const auto type = datatype_of(tensor.scalar_type(), world_rank_);
  const auto mpi_op = op_of(tensor.scalar_type(), op, world_rank_);
  const bool is_root = rank_ == root;
  MPI_Request request;
  check(MPI_Ireduce(is_root ? MPI_IN_PLACE : data(tensor), is_root ? data(tensor) : nullptr,
                    count_of(tensor), type, mpi_op, root, comm_, &request),
        "reduce", world_rank_);
  return started(request, "reduce", {tensor});
}

WorkPtr MpiBackend::all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  at::Tensor buffer = receive_buffer(outputs, input.numel() * size_, input.options());
  WorkPtr work = all_gather_into_tensor(buffer, input);
  std::function<void()> unpack_step = unpacking(buffer, outputs);
  return unpack_step ? then(std::move(work), std::move(unpack_step)) : work;
}

WorkPtr MpiBackend::all_gather_into_tensor(at::Tensor& output, const at::Tensor& input) {
  if (StagedCollectives* staged = staging_for(input.nbytes())) {
    return staged->all_gather(output, input, wait_policy_);
  }
  if (size_ <= kMaxRanksForExchange && input.nbytes() < kMaxBlockBytesForExchange) {
    return exchanged_all_gather(output, input);
  }
  const auto type = datatype_of(input.scalar_type(), world_rank_);
  MPI_Request request;
  check(MPI_Iallgather(data(input), count_of(input), type, data(output), count_of(input), type,
                       comm_, &request),
        "all_gather", world_rank_);
  return started(request, "all_gather", {input, output});
}

MpiWork::Requests MpiBackend::exchange(const at::Tensor& block,
                                       const std::function<const void*(int)>& block_for,
                                       const std::function<void*(int)>& slot_of, int tag,
                                       const char* what) const {
  const auto type = datatype_of(block.scalar_type(), world_rank_);
  const int count = count_of(block);
  MpiWork::Requests requests(2 * (size_ - 1));
  auto request = requests.begin();
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    check(MPI_Irecv(slot_of(peer), count, type, peer, tag, exchange_comm_, &*request++), what,
          world_rank_);
    check(MPI_Isend(block_for(peer), count, type, peer, tag, exchange_comm_, &*request++), what,
          world_rank_);
  }
  return requests;
}

MpiWork::Requests MpiBackend::exchange(const at::Tensor& block, char* slots, int tag,
                                       const char* what) const {
  const auto bytes = static_cast<int64_t>(block.nbytes());
  const void* mine = data(block);
  return exchange(
      block, [mine](int) { return mine; },
      [slots, bytes](int peer) { return slots + peer * bytes; }, tag, what);
}

WorkPtr MpiBackend::exchanged_all_reduce(at::Tensor& tensor, ReduceOp op) {
  at::Tensor blocks = at::empty({size_, tensor.numel()}, tensor.options());
  auto* slots = static_cast<char*>(data(blocks));
  MpiWork::Requests requests = exchange(tensor, slots, kAllReduceTag, "all_reduce");
  auto reduce = [mine = static_cast<char*>(data(tensor)), slots, count = tensor.numel(),
                 dtype = tensor.scalar_type(), op, rank = rank_,
                 size = size_] { reduce_in_rank_order(mine, slots, count, dtype, op, rank, size); };
  return std::make_shared<MpiWork>(std::move(requests), MpiWork::Tensors{tensor, blocks}, reduce,
                                   "all_reduce", world_rank_, wait_policy_);
}

WorkPtr MpiBackend::exchanged_all_gather(at::Tensor& output, const at::Tensor& input) {
  const auto bytes = static_cast<int64_t>(input.nbytes());
  auto* slots = static_cast<char*>(data(output));
  MpiWork::Requests requests = exchange(input, slots, kAllGatherTag, "all_gather");
  // This rank's own block is copied once the messages are through: copied
  // before, it delays the answers to the peers' rendezvous.
  auto copy_own_block = [mine = slots + rank_ * bytes, from = data(input), bytes] {
    if (bytes > 0) std::memcpy(mine, from, bytes);
  };
  return std::make_shared<MpiWork>(std::move(requests), MpiWork::Tensors{input, output},
                                   copy_own_block, "all_gather", world_rank_, wait_policy_);
}

WorkPtr MpiBackend::gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) {
  const auto type = datatype_of(input.scalar_type(), world_rank_);
  const bool is_root = rank_ == root;
  at::Tensor buffer =
      is_root ? receive_buffer(outputs, input.numel() * size_, input.options()) : at::Tensor();
  MPI_Request request;
  check(MPI_Igather(data(input), count_of(input), type, is_root ? data(buffer) : nullptr,
                    count_of(input), type, root, comm_, &request),
        "gather", world_rank_);
  if (!is_root) return started(request, "gather", {input});
  return started(request, "gather", {input, buffer}, unpacking(buffer, outputs));
}

WorkPtr MpiBackend::scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) {
  const auto type = datatype_of(output.scalar_type(), world_rank_);
  const bool is_root = rank_ == root;
  const at::Tensor buffer = is_root ? packed(inputs) : at::Tensor();
  MPI_Request request;
  check(MPI_Iscatter(is_root ? data(buffer) : nullptr, count_of(output), type, data(output),
                     count_of(output), type, root, comm_, &request),
        "scatter", world_rank_);
  return started(request, "scatter", {output, buffer});
}

WorkPtr MpiBackend::reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                   ReduceOp op) {
  if (!fit_blocks(output, inputs, size_)) {
    return reduce_scatter_tensor(output, packed(inputs), op);
  }
  return reduce_scatter_blocks(output, inputs, op);
}

WorkPtr MpiBackend::reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input,
                                          ReduceOp op) {
  // Nothing to move, on every rank alike (they pass the same shapes).
  if (output.numel() == 0) return completed_work();
  return reduce_scatter_blocks(output, input.reshape({-1}).split(output.numel()), op);
}

WorkPtr MpiBackend::reduce_scatter_blocks(at::Tensor& output, std::vector<at::Tensor> blocks,
                                          ReduceOp op) {
  if (output.numel() == 0) return completed_work();
  // Every path writes the output while the blocks are still being read.
  for (at::Tensor& block : blocks) {
    if (at::get_overlap_status(output, block) != at::MemOverlapStatus::No) block = block.clone();
  }
  const bool reducible = can_reduce(output.scalar_type(), op);
  StagedCollectives* staged = reducible ? staging_for(output.nbytes()) : nullptr;
  if (staged) return staged->reduce_scatter(output, blocks, op, wait_policy_);
  if (reducible && size_ <= kMaxRanksForExchange) {
    return exchanged_reduce_scatter(output, blocks, op);
  }
  const at::Tensor buffer = packed(blocks);
  const auto type = datatype_of(output.scalar_type(), world_rank_);
  const auto mpi_op = op_of(output.scalar_type(), op, world_rank_);
  MPI_Request request;
  check(MPI_Ireduce_scatter_block(data(buffer), data(output), count_of(output), type, mpi_op, comm_,
                                  &request),
        "reduce_scatter", world_rank_);
  return started(request, "reduce_scatter", {output, buffer});
}

WorkPtr MpiBackend::exchanged_reduce_scatter(at::Tensor& output,
                                             const std::vector<at::Tensor>& blocks, ReduceOp op) {
  const auto bytes = static_cast<int64_t>(output.nbytes());
  // The first block in rank order besides this rank's own lands in the
  // output itself, so no block is copied: the reduction starts there.
  const int first = rank_ == 0 ? 1 : 0;
  at::Tensor slots = at::empty({size_ > 2 ? size_ : 0, output.numel()}, output.options());
  auto* received = static_cast<char*>(data(slots));
  auto* result = static_cast<char*>(data(output));
  std::vector<const char*> sources;
  for (const at::Tensor& block : blocks) sources.push_back(static_cast<const char*>(data(block)));
  MpiWork::Requests requests = exchange(
      output, [sources](int peer) { return sources[peer]; },
      [=](int peer) -> void* { return peer == first ? result : received + peer * bytes; },
      kReduceScatterTag, "reduce_scatter");
  // Block 0 (op) block 1 (op) ... in rank order, as the simulator reduces:
  // the first step is taken as block 1 (op) block 0 on rank 0, the same
  // bits, every op being commutative.
  auto reduce = [=, count = output.numel(), dtype = output.scalar_type(), rank = rank_,
                 size = size_] {
    for (int r = 0; r < size; ++r) {
      if (r == first) continue;
      reduce_into(result, r == rank ? sources[r] : received + r * bytes, count, dtype, op);
    }
  };
  MpiWork::Tensors keep_alive = {output, slots};
  keep_alive.append(blocks.begin(), blocks.end());
  return std::make_shared<MpiWork>(std::move(requests), std::move(keep_alive), reduce,
                                   "reduce_scatter", world_rank_, wait_policy_);
}

WorkPtr MpiBackend::all_to_all(std::vector<at::Tensor>& outputs,
                               const std::vector<at::Tensor>& inputs) {
  const auto type = datatype_of(inputs.at(0).scalar_type(), world_rank_);
  const at::Tensor sent = packed(inputs);
  at::Tensor received = receive_buffer(outputs, sent.numel(), sent.options());
  const int count = count_of(inputs[0]);
  MPI_Request request;
  check(MPI_Ialltoall(data(sent), count, type, data(received), count, type, comm_, &request),
        "all_to_all", world_rank_);
  return started(request, "all_to_all", {sent, received}, unpacking(received, outputs));
}

WorkPtr MpiBackend::barrier() {
  MPI_Request request;
  check(MPI_Ibarrier(comm_, &request), "barrier", world_rank_);
  return started(request, "barrier", {});
}

WorkPtr MpiBackend::send(const at::Tensor& tensor, int dst, int tag) {
  MPI_Request request;
  check(MPI_Isend(data(tensor), count_of(tensor), datatype_of(tensor.scalar_type(), world_rank_),
                  dst, tag, comm_, &request),
        "send", world_rank_);
  return started(request, "send", {tensor});
}

WorkPtr MpiBackend::recv(at::Tensor& tensor, int src, int tag) {
  MPI_Request request;
  check(MPI_Irecv(data(tensor), count_of(tensor), datatype_of(tensor.scalar_type(), world_rank_),
                  src, tag, comm_, &request),
        "recv", world_rank_);
  return started(request, "recv", {tensor});
}

std::shared_ptr<Backend> MpiBackend::split(const std::vector<int>& ranks) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  const bool member = me != ranks.end();
  MPI_Comm comm;
  check(MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED,
                       member ? static_cast<int>(me - ranks.begin()) : 0, &comm),
        "new_group (MPI_Comm_split)", world_rank_);
  if (!member) return nullptr;
  return std::make_shared<MpiBackend>(comm, wait_policy_, world_rank_);
}

}  // namespace engine::dist::mpi
