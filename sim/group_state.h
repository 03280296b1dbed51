#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "sim/call_record.h"
#include "sim/world_state.h"

namespace sim {

// The meeting point of one group's ranks, shared by their thread-ranks.
//
// A collective runs in two phases. Arrival: every rank publishes its
// CallRecord; the last to arrive compares all of them, so a mismatch is raised
// on every rank before any data moves. Movement: the work is cut into one task
// per rank (task k is rank k's share: for all_reduce, reducing chunk k of all
// inputs into all outputs). Small payloads are moved by the last arrival alone
// (one wake-up instead of two); large ones by every rank in parallel, with a
// second barrier before anyone returns.
//
// Once every rank has arrived the collective is committed: no rank leaves (on
// a peer failure or a timeout) while another may still touch its tensors.
class GroupState {
 public:
  using Calls = std::vector<const CallRecord*>;
  using Task = std::function<void(int task, const Calls& calls)>;

  GroupState(WorldState& world, std::string name, std::vector<int> global_ranks);

  int size() const { return static_cast<int>(global_ranks_.size()); }
  const std::string& name() const { return name_; }
  int global_rank(int group_rank) const { return global_ranks_[group_rank]; }

  // Runs one collective for group rank `rank`. `check` may reject the
  // matching calls with a message (for example an unsupported dtype); it and
  // `task` run on one rank / on each rank as described above.
  void collective(int rank, const CallRecord& call,
                  const std::function<std::string(const Calls&)>& check, const Task& task);

  // Point to point. A send is posted at once and completes when the receiver
  // has copied the data (so "send to each other, then receive" works as on
  // real backends); a receive blocks until its send is posted and copies it.
  struct PendingSend {
    CallRecord call;
    int rank;  // sender's group rank
    int dst;
    int tag;
    bool taken = false;
    bool done = false;
    std::string mismatch;
  };
  std::shared_ptr<PendingSend> post_send(int rank, CallRecord call, int dst, int tag);
  bool send_done(const PendingSend& pending);
  void wait_send(const std::shared_ptr<PendingSend>& pending, std::chrono::milliseconds timeout);
  void recv(int rank, const CallRecord& call, int src, int tag);

 private:
  struct Barrier {
    int arrived = 0;
    std::atomic<uint64_t> generation{0};  // read without the lock by released waiters
    std::vector<bool> here;
    WorldState::Abandonment abandoned;  // set when a wait timed out; cleared once all left
  };
  struct Verdict {
    std::string mismatch;  // empty when the calls match
    bool invalid = false;  // the mismatch is an argument error, not a desync
    bool moved = false;    // the last arrival already moved the data
  };
  // Arrives at `barrier` and waits for the others; the last arrival runs
  // `on_last` without the lock, then releases them. Returns with `lock` held,
  // or not held when released while yielding (see WorldState::wait). `abortable`: whether the
  // wait may give up (peer failure, deadlock, timeout) while ranks are missing.
  void arrive(std::unique_lock<std::mutex>& lock, Barrier& barrier, int rank, bool abortable,
              const std::function<void()>& on_last);
  Verdict judge(const std::function<std::string(const Calls&)>& check) const;
  std::string mismatch_message(const std::string& intro) const;

  WorldState& world_;
  const std::string name_;
  const std::vector<int> global_ranks_;
  Calls calls_;
  Barrier arrival_;
  Barrier departure_;
  Verdict verdict_;
  std::map<std::tuple<int, int, int>, std::deque<std::shared_ptr<PendingSend>>>
      mailbox_;  // (src, dst, tag)
};

}  // namespace sim
