#include "engine/dist/backends/mpi/staged_collectives.h"

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "engine/dist/backends/mpi/mpi_types.h"

namespace engine::dist::mpi {
namespace {

constexpr int kNoticeTag = 0;

// The communicator's collectives, for making segments.
shm::SegmentCollectives collectives_of(MPI_Comm comm, int size, int world_rank) {
  auto all_gather_names = [comm, size, world_rank](const std::vector<char>& mine) {
    std::vector<char> all(mine.size() * static_cast<size_t>(size));
    const auto bytes = static_cast<int>(mine.size());
    check(MPI_Allgather(mine.data(), bytes, MPI_CHAR, all.data(), bytes, MPI_CHAR, comm),
          "staging area (MPI_Allgather)", world_rank);
    return all;
  };
  auto all_true = [comm, world_rank](bool mine) {
    int all = mine ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm),
          "staging area (MPI_Allreduce)", world_rank);
    return all == 1;
  };
  return {all_gather_names, all_true};
}

const char* bytes_of(const at::Tensor& tensor) {
  return static_cast<const char*>(tensor.data_ptr());
}

}  // namespace

// One staged operation, advanced by its MpiWork: the round for chunk k
// waits for every peer's message that its chunk k is staged (and for this
// rank's own messages to go out).
class StagedCall {
 public:
  StagedCall(const StagedCollectives& staged, shm::StagedTransfer transfer, const char* what)
      : staged_(&staged), transfer_(std::move(transfer)), what_(what) {}

  // Stages chunk 0; its round's requests (none when the blocks are empty).
  MpiWork::Requests start() const {
    if (transfer_.chunks() == 0) return {};
    transfer_.stage(0);
    return announced();
  }

  // MpiWork's NextRound: chunk next_ is staged on every rank.
  bool operator()(MpiWork::Requests& requests) {
    if (next_ >= transfer_.chunks()) return false;
    transfer_.consume(next_);
    if (++next_ == transfer_.chunks()) return false;
    transfer_.stage(next_);
    requests = announced();
    return true;
  }

 private:
  MpiWork::Requests announced() const {
    const shm::StagingArea& area = *staged_->area_;
    MpiWork::Requests requests;
    for (int peer = 0; peer < area.size(); ++peer) {
      if (peer == area.rank()) continue;
      requests.emplace_back();
      check(MPI_Irecv(nullptr, 0, MPI_BYTE, peer, kNoticeTag, staged_->notices_, &requests.back()),
            what_, staged_->world_rank_);
      requests.emplace_back();
      check(MPI_Isend(nullptr, 0, MPI_BYTE, peer, kNoticeTag, staged_->notices_, &requests.back()),
            what_, staged_->world_rank_);
    }
    return requests;
  }

  const StagedCollectives* staged_;
  shm::StagedTransfer transfer_;
  const char* what_;
  int64_t next_ = 0;  // the chunk the current round waits for
};

std::unique_ptr<StagedCollectives> StagedCollectives::create(MPI_Comm comm, int world_rank) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  auto area = shm::StagingArea::create(rank, size, collectives_of(comm, size, world_rank));
  if (!area) return nullptr;
  MPI_Comm notices;
  check(MPI_Comm_dup(comm, &notices), "staging area (MPI_Comm_dup)", world_rank);
  return std::unique_ptr<StagedCollectives>(
      new StagedCollectives(std::move(area), notices, world_rank));
}

StagedCollectives::StagedCollectives(std::unique_ptr<shm::StagingArea> area, MPI_Comm notices,
                                     int world_rank)
    : area_(std::move(area)), notices_(notices), world_rank_(world_rank) {}

StagedCollectives::~StagedCollectives() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&notices_);
}

WorkPtr StagedCollectives::reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& blocks,
                                          ReduceOp op, WaitPolicy policy) {
  std::vector<const char*> sources;
  MpiWork::Tensors keep_alive = {output};
  for (const at::Tensor& block : blocks) {
    sources.push_back(bytes_of(block));
    keep_alive.push_back(block);
  }
  auto transfer = shm::StagedTransfer::reduce_scatter(
      *area_, std::move(sources), static_cast<char*>(output.data_ptr()),
      static_cast<int64_t>(output.nbytes()), output.scalar_type(), op);
  return start(StagedCall(*this, std::move(transfer), "reduce_scatter"), std::move(keep_alive),
               "reduce_scatter", policy);
}

WorkPtr StagedCollectives::all_gather(at::Tensor& output, const at::Tensor& input,
                                      WaitPolicy policy) {
  auto transfer = shm::StagedTransfer::all_gather(*area_, bytes_of(input),
                                                  static_cast<char*>(output.data_ptr()),
                                                  static_cast<int64_t>(input.nbytes()));
  return start(StagedCall(*this, std::move(transfer), "all_gather"), {output, input}, "all_gather",
               policy);
}

// The operation before must be complete: the two halves of the area can
// only be reused in order.
WorkPtr StagedCollectives::start(StagedCall call, MpiWork::Tensors keep_alive, const char* what,
                                 WaitPolicy policy) {
  if (in_flight_) in_flight_->wait();
  MpiWork::Requests first_round = call.start();
  in_flight_ = MpiWork::in_rounds(std::move(first_round), std::move(keep_alive), std::move(call),
                                  what, world_rank_, policy);
  return in_flight_;
}

}  // namespace engine::dist::mpi
