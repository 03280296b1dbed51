#pragma once

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/dist/errors.h"
#include "sim/call_record.h"
#include "sim/turns.h"
#include "sim/virtual_clock.h"
#include "sim/world.h"

namespace sim {

class GroupState;

// What every thread-rank of one World shares: one mutex and condition
// variable for all waits, what each rank is doing, the first failure, and the
// groups. One lock keeps the bookkeeping simple and the waits exact; the
// critical sections are short and data moves outside it.
//
// Waiting never spins: a rank blocks on the condition variable until a change
// that may let it go on is followed by notify().
class WorldState {
 public:
  WorldState(int size, WorldOptions options);

  int size() const { return size_; }
  const WorldOptions& options() const { return options_; }
  std::mutex& mutex() { return mutex_; }

  // A rendezvous a wait timed out on: the message every waiter on it fails
  // with (empty: not abandoned), and the ranks it lacked.
  struct Abandonment {
    std::string message;
    std::vector<int> missing;
  };

  struct Wait {
    int rank;                                   // global rank that waits
    std::function<bool()> ready;                // true once it may go on
    std::function<std::vector<int>()> missing;  // global ranks still owing their part
    std::function<void()> abort;                // undoes this rank's arrival
    // Where a timed-out wait leaves its message for the others waiting on the
    // same rendezvous, so that they all fail at once naming the same ranks
    // (nullptr: nothing is shared).
    Abandonment* abandoned = nullptr;
    std::chrono::milliseconds timeout = std::chrono::milliseconds::max();  // max: options().timeout
    // A barrier wait: done once *released differs from released_from. Its
    // waker calls release() for this rank before publishing, so the wait may
    // return without taking the lock again (nullptr: not a barrier wait).
    const std::atomic<uint64_t>* released = nullptr;
    uint64_t released_from = 0;
  };

  // Blocks (with `lock` on mutex()) until w.ready(). Returns with the lock
  // held, except for a barrier wait released while yielding (then
  // lock.owns_lock() is false and the waker did this rank's bookkeeping). Throws PeerFailure once a
  // rank failed, CollectiveMismatch when every live rank waits and none of
  // their waits can go on (a deadlock: calls that cannot match up), Timeout
  // when ranks owed their part longer than the timeout. Calls w.abort()
  // before throwing. The deadlock check asks every waiting rank's Wait, so
  // wakers need no bookkeeping beyond notify().
  void wait(std::unique_lock<std::mutex>& lock, const Wait& w);

  // Does a released barrier waiter's bookkeeping for it (lock held), before
  // the barrier publishes its new generation.
  void release(int rank);

  // Wakes the waiters after a change that may let them go on (lock held).
  void notify() {
    ++changes_;
    cv_.notify_all();
  }

  // Applies the fault plan where `rank` starts a call of `kind` (without
  // the lock): counts the call, then crashes the rank (throws InjectedCrash,
  // after marking it failed so that the others fail fast), delays it, or
  // holds it until every other rank finished (then throws InjectedHang).
  // Returns the seed of the bytes the rank sends instead of its own when the
  // plan garbles this call.
  std::optional<uint64_t> before_call(int rank, const char* kind);

  // Throws PeerFailure if some rank failed (with the lock held).
  void check_no_failure(int rank, const CallRecord& call, const std::string& group) const;

  // Marks `rank` as inside `call` on `group` for its lifetime (construct and
  // destroy it with the lock held). Messages describe ranks from these marks,
  // formatted only when an error needs them.
  class InCall {
   public:
    // `lock` holds mutex(); if it no longer does at the end, release() already
    // cleared the mark.
    InCall(WorldState& world, std::unique_lock<std::mutex>& lock, int rank, const CallRecord& call,
           const std::string& group);
    ~InCall();
    InCall(const InCall&) = delete;
    InCall& operator=(const InCall&) = delete;

   private:
    WorldState& world_;
    std::unique_lock<std::mutex>& lock_;
    int rank_;
  };

  // A rank's thread begins (deterministic runs: it waits for its turn).
  void rank_started(int rank);
  void rank_exited(int rank);
  void rank_failed(int rank, std::exception_ptr error);
  std::exception_ptr first_failure() const { return first_failure_; }

  // The group state for `key` (shared by its members), created on first use.
  // Takes the lock itself.
  std::shared_ptr<GroupState> group(const std::string& key, const std::vector<int>& global_ranks);

  std::vector<std::string> trace() const;

  // " (sim seed=N, world size W)": the tail of every simulator message.
  std::string tag() const;

 private:
  // kHeld: kept from its call by the fault plan (a delay or a hang); absent,
  // like a rank running its own code, so never part of a deadlock.
  enum class Status { kRunning, kBlocked, kHeld, kExited, kFailed };
  static constexpr int64_t kNever = VirtualClock::kNever;
  struct RankInfo {
    Status status = Status::kRunning;
    const CallRecord* call = nullptr;  // the call it is in, if any
    const char* last_kind = nullptr;   // the last call it entered
    uint64_t last_seq = 0;
    const std::string* group = nullptr;  // that call's group name (groups outlive ranks)
    const Wait* wait = nullptr;          // while blocked
    uint64_t deadlock_epoch = 0;         // the epoch its wait began in
    int64_t deadline_ms = kNever;        // virtual time: when its wait times out
    int64_t wake_ms = kNever;            // kHeld: when it may go on (kNever: a hang)
    uint64_t calls = 0;                  // calls started (counted with a plan or a schedule)
    const Fault* fault = nullptr;        // kHeld: the fault holding it
    std::vector<int> timed_out_on;       // the ranks its last timed-out wait lacked
  };
  // A wait's deadline on the wall clock and, with virtual time, on the virtual one.
  struct Deadline {
    std::chrono::steady_clock::time_point wall;
    bool expired(const WorldState& world, const RankInfo& info) const;
  };

  // The bounded yield phase of a wait (see WorldOptions::yields_before_blocking).
  // True when a barrier wait was released meanwhile; the lock is then not held.
  bool yield_until_change(std::unique_lock<std::mutex>& lock, const Wait& w);
  bool can_go_on(int rank) const;
  bool held_back(int rank) const;
  Deadline start_deadline(RankInfo& info, std::chrono::milliseconds timeout) const;
  // With virtual time: once no rank can go on, jumps to the earliest deadline
  // or wake-up of a waiting or held rank and wakes everyone; true if it did.
  bool advance_clock_if_idle();
  void hold(std::unique_lock<std::mutex>& lock, int rank, const Fault& fault);
  void mark_failed(int rank, std::exception_ptr error);
  // Deterministic runs: a scheduling point of `rank` (lock held): logs
  // `event`, lets the schedule pick who runs next, and returns once `rank`
  // runs again. A failed rank keeps running until its thread ends.
  void yield_turn(std::unique_lock<std::mutex>& lock, int rank, const std::string& event);
  void pass_turn(int yielding);
  void await_turn(std::unique_lock<std::mutex>& lock, int rank);
  // A finished rank that holds the turn hands it on.
  void end_turn(int rank, const char* event);
  bool everyone_stuck() const;
  void declare_deadlock();
  std::string where(int rank) const;
  engine::dist::PeerFailure peer_failure(int rank, const std::string& where) const;
  std::string describe_rank(int rank) const;
  std::string timeout_message(const Wait& w, const std::vector<int>& missing,
                              std::chrono::milliseconds timeout) const;
  [[noreturn]] void fail_wait(const Wait& w, std::exception_ptr error);

  const int size_;
  const WorldOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<uint64_t> changes_{0};  // bumped by notify(): read without the lock while yielding
  std::vector<RankInfo> ranks_;
  std::exception_ptr first_failure_;
  int failed_rank_ = -1;
  uint64_t deadlock_epoch_ = 0;
  VirtualClock clock_;
  Turns turns_;
  std::string deadlock_message_;
  std::map<std::string, std::shared_ptr<GroupState>> groups_;
};

}  // namespace sim
