#include "sim/group_state.h"

#include <algorithm>
#include <cstring>

#include "engine/dist/describe.h"
#include "engine/dist/errors.h"
#include "sim/world_state.h"

namespace sim {
namespace {

// Below this many bytes per rank the last arrival moves all data itself.
constexpr int64_t kSmallPayloadBytes = 64 * 1024;

}  // namespace

using engine::dist::on_rank;

GroupState::GroupState(WorldState& world, std::string name, std::vector<int> global_ranks)
    : world_(world), name_(std::move(name)), global_ranks_(std::move(global_ranks)) {
  calls_.resize(size());
  arrival_.here.resize(size());
  departure_.here.resize(size());
}

void GroupState::arrive(std::unique_lock<std::mutex>& lock, Barrier& barrier, int rank,
                        bool abortable, const std::function<void()>& on_last) {
  if (!barrier.abandoned.message.empty()) {
    throw engine::dist::Timeout(on_rank(global_ranks_[rank], barrier.abandoned.message));
  }
  const uint64_t generation = barrier.generation.load();
  barrier.here[rank] = true;
  if (++barrier.arrived == size()) {
    lock.unlock();
    on_last();
    lock.lock();
    barrier.arrived = 0;
    barrier.here.assign(size(), false);
    for (int r = 0; r < size(); ++r) {
      if (r != rank) world_.release(global_ranks_[r]);
    }
    ++barrier.generation;  // publishes on_last's results to the released ranks
    world_.notify();
    return;
  }
  world_.wait(
      lock, WorldState::Wait{global_ranks_[rank], [&] { return barrier.generation != generation; },
                             [&] {
                               std::vector<int> missing;
                               if (!abortable) return missing;
                               for (int r = 0; r < size(); ++r) {
                                 if (!barrier.here[r]) missing.push_back(global_ranks_[r]);
                               }
                               return missing;
                             },
                             [&] {
                               barrier.here[rank] = false;
                               if (--barrier.arrived == 0) barrier.abandoned = {};
                             },
                             abortable ? &barrier.abandoned : nullptr,
                             std::chrono::milliseconds::max(), &barrier.generation, generation});
}

std::string GroupState::mismatch_message(const std::string& intro) const {
  std::string message = intro + " on group " + name_ + ":";
  for (int r = 0; r < size(); ++r) {
    message += "\n  rank " + std::to_string(global_ranks_[r]) + ": " + calls_[r]->describe();
  }
  return message;
}

GroupState::Verdict GroupState::judge(const std::function<std::string(const Calls&)>& check) const {
  Verdict verdict;
  for (int r = 1; r < size(); ++r) {
    if (!calls_[r]->same_call(*calls_[0])) {
      verdict.mismatch = mismatch_message("ranks called different collectives") +
                         "\nMake every rank of the group issue the same collectives (kind, dtype, "
                         "shape, op, root) in the same order" +
                         world_.tag();
      return verdict;
    }
  }
  const std::string problem = check(calls_);
  if (!problem.empty()) {
    verdict.mismatch = mismatch_message(problem) + world_.tag();
    verdict.invalid = true;
  }
  return verdict;
}

void GroupState::collective(int rank, const CallRecord& call,
                            const std::function<std::string(const Calls&)>& check,
                            const Task& task) {
  const int me = global_ranks_[rank];
  std::unique_lock<std::mutex> lock(world_.mutex());
  world_.check_no_failure(me, call, name_);
  const WorldState::InCall in_call(world_, lock, me, call, name_);
  calls_[rank] = &call;
  arrive(lock, arrival_, rank, /*abortable=*/true, [&] {
    verdict_ = judge(check);
    verdict_.moved = verdict_.mismatch.empty() && call.payload_bytes() <= kSmallPayloadBytes;
    if (verdict_.moved) {
      for (int k = 0; k < size(); ++k) task(k, calls_);
    }
  });
  const Verdict verdict = verdict_;
  if (!verdict.mismatch.empty()) {
    if (verdict.invalid) throw engine::dist::InvalidArgument(on_rank(me, verdict.mismatch));
    throw engine::dist::CollectiveMismatch(on_rank(me, verdict.mismatch));
  }
  if (!verdict.moved) {
    if (lock.owns_lock()) lock.unlock();
    task(rank, calls_);
    lock.lock();
    arrive(lock, departure_, rank, /*abortable=*/false, [] {});
  }
}

std::shared_ptr<GroupState::PendingSend> GroupState::post_send(int rank, CallRecord call, int dst,
                                                               int tag) {
  auto pending = std::make_shared<PendingSend>(PendingSend{std::move(call), rank, dst, tag});
  const int me = global_ranks_[rank];
  std::lock_guard<std::mutex> lock(world_.mutex());
  world_.check_no_failure(me, pending->call, name_);
  mailbox_[{rank, dst, tag}].push_back(pending);
  world_.notify();
  return pending;
}

bool GroupState::send_done(const PendingSend& pending) {
  std::lock_guard<std::mutex> lock(world_.mutex());
  return pending.done;
}

void GroupState::wait_send(const std::shared_ptr<PendingSend>& pending,
                           std::chrono::milliseconds timeout) {
  const int me = global_ranks_[pending->rank];
  std::unique_lock<std::mutex> lock(world_.mutex());
  const WorldState::InCall in_call(world_, lock, me, pending->call, name_);
  auto& queue = mailbox_[{pending->rank, pending->dst, pending->tag}];
  world_.wait(lock, WorldState::Wait{
                        me, [&] { return pending->done; },
                        [&] {
                          return pending->taken ? std::vector<int>{}
                                                : std::vector<int>{global_ranks_[pending->dst]};
                        },
                        [&] { queue.erase(std::find(queue.begin(), queue.end(), pending)); },
                        nullptr, timeout});
  if (!pending->mismatch.empty()) {
    throw engine::dist::CollectiveMismatch(on_rank(me, pending->mismatch));
  }
}

void GroupState::recv(int rank, const CallRecord& call, int src, int tag) {
  const int me = global_ranks_[rank];
  std::unique_lock<std::mutex> lock(world_.mutex());
  world_.check_no_failure(me, call, name_);
  const WorldState::InCall in_call(world_, lock, me, call, name_);
  auto& queue = mailbox_[{src, rank, tag}];
  world_.wait(lock, WorldState::Wait{me, [&] { return !queue.empty(); },
                                     [&] { return std::vector<int>{global_ranks_[src]}; }, [] {}});
  const std::shared_ptr<PendingSend> pending = queue.front();
  queue.pop_front();
  pending->taken = true;
  const CallRecord& sent = pending->call;
  if (sent.dtype != call.dtype || sent.tensor.numel() != call.tensor.numel()) {
    pending->mismatch = "send/recv mismatch on group " + name_ + " (tag " + std::to_string(tag) +
                        "): rank " + std::to_string(global_ranks_[src]) + " sends " +
                        sent.describe() + ", rank " + std::to_string(me) + " receives into " +
                        call.describe() + "\nSend and receive the same dtype and element count" +
                        world_.tag();
  } else {
    lock.unlock();
    // An empty tensor may have no storage: memcpy's null pointers are
    // undefined even for no bytes.
    if (call.tensor.nbytes() > 0) {
      std::memcpy(call.tensor.data_ptr(), sent.tensor.data_ptr(), call.tensor.nbytes());
    }
    lock.lock();
  }
  const std::string mismatch = pending->mismatch;
  pending->done = true;
  world_.notify();
  if (!mismatch.empty()) throw engine::dist::CollectiveMismatch(on_rank(me, mismatch));
}

}  // namespace sim
