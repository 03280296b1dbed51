#include "sim/world_state.h"

#include <algorithm>
#include <thread>

#include "engine/dist/describe.h"
#include "engine/dist/errors.h"
#include "sim/group_state.h"

namespace sim {

using engine::dist::on_rank;

WorldState::WorldState(int size, WorldOptions options)
    : size_(size),
      options_(std::move(options)),
      ranks_(size),
      clock_(options_.virtual_time || options_.deterministic),
      turns_(options_.deterministic, options_.seed, size) {}

std::vector<std::string> WorldState::trace() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return turns_.trace();
}

void WorldState::pass_turn(int yielding) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<int> runnable;
    for (int r = 0; r < size_; ++r) {
      const Status status = ranks_[r].status;
      if (status != Status::kExited && status != Status::kFailed && can_go_on(r)) {
        runnable.push_back(r);
      }
    }
    if (!runnable.empty()) {
      turns_.give(runnable, yielding);
      notify();
      return;
    }
    // Nobody can run: let time pass, else the waits cannot match up.
    if (!advance_clock_if_idle() && everyone_stuck()) declare_deadlock();
  }
  turns_.give_up();  // every rank has finished
}

void WorldState::yield_turn(std::unique_lock<std::mutex>& lock, int rank,
                            const std::string& event) {
  if (!turns_.enabled() || ranks_[rank].status == Status::kFailed) return;
  turns_.record(rank, event);
  pass_turn(rank);
  await_turn(lock, rank);
}

void WorldState::await_turn(std::unique_lock<std::mutex>& lock, int rank) {
  const auto give_up = std::chrono::steady_clock::now() + 2 * options_.timeout;
  while (!turns_.held_by(rank)) {
    if (cv_.wait_until(lock, give_up) == std::cv_status::timeout && !turns_.held_by(rank)) {
      throw engine::dist::Timeout(on_rank(
          rank, "the deterministic scheduler gave rank " + std::to_string(rank) +
                    " no turn for twice the timeout (a simulator bug; please report it)" + tag()));
    }
  }
}

std::string WorldState::tag() const {
  std::string tag =
      " (sim seed=" + std::to_string(options_.seed) + ", world size " + std::to_string(size_);
  if (!options_.faults.empty()) tag += ", faults " + options_.faults.to_string();
  if (options_.deterministic) tag += ", deterministic";
  return tag + ")";
}

WorldState::InCall::InCall(WorldState& world, std::unique_lock<std::mutex>& lock, int rank,
                           const CallRecord& call, const std::string& group)
    : world_(world), lock_(lock), rank_(rank) {
  RankInfo& info = world.ranks_[rank];
  info.call = &call;
  info.last_kind = call.kind;
  info.last_seq = call.seq;
  info.group = &group;
}

WorldState::InCall::~InCall() {
  if (lock_.owns_lock()) world_.ranks_[rank_].call = nullptr;
}

void WorldState::release(int rank) {
  RankInfo& info = ranks_[rank];
  info.status = Status::kRunning;
  info.wait = nullptr;
  info.call = nullptr;
}

std::string WorldState::where(int rank) const {
  const RankInfo& info = ranks_[rank];
  if (info.call) return info.call->describe() + " on group " + *info.group;
  if (!info.last_kind) return "before its first call";
  return std::string("after ") + info.last_kind + " #" + std::to_string(info.last_seq) +
         " on group " + *info.group;
}

// Where the failed rank itself timed out waiting for others (a rank with
// several calls in flight may be released by it, not by them), the message
// names them too: they are the root cause.
engine::dist::PeerFailure WorldState::peer_failure(int rank, const std::string& where) const {
  std::string failed = "rank " + std::to_string(failed_rank_) + " failed";
  const std::vector<int>& lacked = ranks_[failed_rank_].timed_out_on;
  for (size_t i = 0; i < lacked.size(); ++i) {
    failed += (i == 0 ? " (it timed out waiting for rank " : ", rank ") + std::to_string(lacked[i]);
    if (i + 1 == lacked.size()) failed += ")";
  }
  return engine::dist::PeerFailure(
      on_rank(rank, failed + ", so " + where + " cannot complete; see rank " +
                        std::to_string(failed_rank_) + "'s error" + tag()));
}

void WorldState::check_no_failure(int rank, const CallRecord& call,
                                  const std::string& group) const {
  if (first_failure_) throw peer_failure(rank, call.describe() + " on group " + group);
}

bool WorldState::held_back(int rank) const {
  const RankInfo& info = ranks_[rank];
  if (info.wake_ms != kNever) {
    return clock_.before(info.wake_ms);
  }
  // Ranks that never arrive wait for the rest, not for each other.
  for (int r = 0; r < size_; ++r) {
    const RankInfo& other = ranks_[r];
    const bool never_arrives = other.status == Status::kHeld && other.wake_ms == kNever;
    if (r != rank && !never_arrives && other.status != Status::kExited &&
        other.status != Status::kFailed) {
      return true;
    }
  }
  return false;
}

bool WorldState::can_go_on(int rank) const {
  const RankInfo& info = ranks_[rank];
  if (info.status == Status::kRunning) return true;
  if (info.status == Status::kHeld) return !held_back(rank);
  if (info.status != Status::kBlocked) return false;
  const Wait& w = *info.wait;
  return w.ready() || first_failure_ || info.deadlock_epoch != deadlock_epoch_ ||
         (w.abandoned && !w.abandoned->message.empty()) || clock_.reached(info.deadline_ms);
}

bool WorldState::everyone_stuck() const {
  bool anyone_blocked = false;
  for (int r = 0; r < size_; ++r) {
    if (can_go_on(r) || ranks_[r].status == Status::kHeld) return false;
    anyone_blocked |= ranks_[r].status == Status::kBlocked;
  }
  return anyone_blocked;
}

bool WorldState::advance_clock_if_idle() {
  int64_t next = kNever;
  for (int r = 0; r < size_; ++r) {
    if (can_go_on(r)) return false;
    const RankInfo& info = ranks_[r];
    if (info.status == Status::kBlocked) next = std::min(next, info.deadline_ms);
    if (info.status == Status::kHeld) next = std::min(next, info.wake_ms);
  }
  if (!clock_.advance_to(next)) return false;
  notify();
  return true;
}

WorldState::Deadline WorldState::start_deadline(RankInfo& info,
                                                std::chrono::milliseconds timeout) const {
  const auto wall_now = std::chrono::steady_clock::now();
  const auto wall_room = std::chrono::steady_clock::time_point::max() - wall_now;
  info.deadline_ms = clock_.after(timeout);
  return Deadline{timeout >= wall_room ? std::chrono::steady_clock::time_point::max()
                                       : wall_now + timeout};
}

bool WorldState::Deadline::expired(const WorldState& world, const RankInfo& info) const {
  if (world.clock_.reached(info.deadline_ms)) return true;
  return std::chrono::steady_clock::now() >= wall;
}

std::string WorldState::describe_rank(int rank) const {
  const std::string who = "rank " + std::to_string(rank);
  const std::string where = this->where(rank);
  const RankInfo& info = ranks_[rank];
  switch (info.status) {
    case Status::kRunning:
      return who + " is running its own code (" + where + ")";
    case Status::kBlocked:
      return who + " waits in " + where;
    case Status::kHeld:
      return who + " is held back by the fault plan (" + FaultPlan{{*info.fault}}.to_string() +
             ") at its call #" + std::to_string(info.calls) + " (" + where + ")";
    case Status::kExited:
      return who + " has returned from its body (" + where + ")";
    case Status::kFailed:
      return who + " has failed (" + where + ")";
  }
  return who;
}

void WorldState::declare_deadlock() {
  std::string message =
      "deadlock: every live rank waits and no call can complete - the ranks' calls "
      "do not match up:";
  for (int r = 0; r < size_; ++r) message += "\n  " + describe_rank(r);
  message += "\nMake every rank of a group issue the same collectives in the same order" + tag();
  deadlock_message_ = message;
  ++deadlock_epoch_;
  notify();
}

void WorldState::fail_wait(const Wait& w, std::exception_ptr error) {
  w.abort();
  ranks_[w.rank].status = Status::kRunning;
  ranks_[w.rank].wait = nullptr;
  std::rethrow_exception(error);
}

bool WorldState::yield_until_change(std::unique_lock<std::mutex>& lock, const Wait& w) {
  if (options_.yields_before_blocking <= 0) return false;
  auto released = [&] { return w.released && w.released->load() != w.released_from; };
  const uint64_t seen = changes_.load();
  lock.unlock();
  for (int i = 0; i < options_.yields_before_blocking && changes_.load() == seen && !released();
       ++i) {
    std::this_thread::yield();
  }
  if (released()) return true;
  lock.lock();
  return false;
}

void WorldState::wait(std::unique_lock<std::mutex>& lock, const Wait& w) {
  if (w.ready()) return;
  RankInfo& me = ranks_[w.rank];
  me.status = Status::kBlocked;
  me.wait = &w;
  me.deadlock_epoch = deadlock_epoch_;
  const uint64_t epoch = deadlock_epoch_;
  // Set before the lock is let go: a rank that advances the virtual clock
  // meanwhile must see this wait's deadline, not a stale one.
  const auto timeout = std::min(w.timeout, options_.timeout);
  Deadline deadline = start_deadline(me, timeout);
  if (everyone_stuck()) declare_deadlock();
  if (!turns_.enabled() && yield_until_change(lock, w)) return;
  while (!w.ready()) {
    // A timeout shared by the waiters wins over the failure it causes: a
    // waiter that timed out first may already have ended its rank.
    if (w.abandoned && !w.abandoned->message.empty()) {
      me.timed_out_on = w.abandoned->missing;
      fail_wait(
          w, std::make_exception_ptr(engine::dist::Timeout(on_rank(w.rank, w.abandoned->message))));
    }
    if (first_failure_) {
      fail_wait(w, std::make_exception_ptr(peer_failure(w.rank, where(w.rank))));
    }
    if (deadlock_epoch_ != epoch) {
      fail_wait(w, std::make_exception_ptr(
                       engine::dist::CollectiveMismatch(on_rank(w.rank, deadlock_message_))));
    }
    if (deadline.expired(*this, me)) {
      const std::vector<int> missing = w.missing();
      if (missing.empty()) {  // everyone arrived; the last one is still moving data
        deadline = start_deadline(me, timeout);
        continue;
      }
      const std::string message = timeout_message(w, missing, timeout);
      me.timed_out_on = missing;
      if (w.abandoned) *w.abandoned = {message, missing};
      notify();
      fail_wait(w, std::make_exception_ptr(engine::dist::Timeout(on_rank(w.rank, message))));
    }
    if (turns_.enabled()) {
      yield_turn(lock, w.rank, "waits");
      continue;
    }
    if (clock_.enabled() && advance_clock_if_idle()) continue;
    cv_.wait_until(lock, deadline.wall);
  }
  me.status = Status::kRunning;
  me.wait = nullptr;
}

std::string WorldState::timeout_message(const Wait& w, const std::vector<int>& missing,
                                        std::chrono::milliseconds timeout) const {
  std::string message = where(w.rank) + " timed out after " + std::to_string(timeout.count()) +
                        " ms waiting for rank(s) " + engine::dist::describe_ranks(missing) + ":";
  for (const int r : missing) message += "\n  " + describe_rank(r);
  return message + "\nFind why they did not arrive (a hang, a skipped call) or raise the timeout" +
         tag();
}

void WorldState::rank_exited(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  ranks_[rank].status = Status::kExited;
  if (everyone_stuck()) declare_deadlock();
  notify();  // a rank held until the others finish may go on
  end_turn(rank, "exits");
}

void WorldState::rank_started(int rank) {
  if (!turns_.enabled()) return;
  std::unique_lock<std::mutex> lock(mutex_);
  if (turns_.unheld()) pass_turn(-1);
  await_turn(lock, rank);
}

void WorldState::end_turn(int rank, const char* event) {
  if (!turns_.enabled() || !turns_.held_by(rank)) return;
  turns_.record(rank, event);
  pass_turn(rank);
}

void WorldState::mark_failed(int rank, std::exception_ptr error) {
  ranks_[rank].status = Status::kFailed;
  if (!first_failure_) {
    first_failure_ = error;
    failed_rank_ = rank;
  }
  notify();
}

void WorldState::rank_failed(int rank, std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  mark_failed(rank, std::move(error));
  end_turn(rank, "fails");
}

void WorldState::hold(std::unique_lock<std::mutex>& lock, int rank, const Fault& fault) {
  RankInfo& me = ranks_[rank];
  me.status = Status::kHeld;
  me.fault = &fault;
  const bool hang = fault.kind == Fault::Kind::kNeverArrive;
  me.wake_ms = hang ? kNever : clock_.after(fault.delay);
  notify();  // waiters may now find the whole world idle
  if (!hang && !clock_.enabled()) {
    lock.unlock();
    std::this_thread::sleep_for(fault.delay);
    lock.lock();
  }
  while (held_back(rank)) {
    if (turns_.enabled()) {
      yield_turn(lock, rank, "is held");
      continue;
    }
    if (clock_.enabled() && advance_clock_if_idle()) continue;
    cv_.wait_for(lock, options_.timeout);
  }
  me.status = Status::kRunning;
  me.fault = nullptr;
  me.wake_ms = kNever;
}

std::optional<uint64_t> WorldState::before_call(int rank, const char* kind) {
  // Without faults or a schedule there is nothing to count or decide: the
  // common case takes no lock.
  if (options_.faults.empty() && !turns_.enabled()) return std::nullopt;
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t call = ++ranks_[rank].calls;
  yield_turn(lock, rank, "call #" + std::to_string(call) + " " + kind);
  const Fault* fault = options_.faults.find(rank, call);
  if (!fault) return std::nullopt;
  if (fault->kind == Fault::Kind::kGarble) return call * 1000003 + static_cast<uint64_t>(rank);
  const std::string what = "at its call #" + std::to_string(call) + " (" + kind +
                           ") as the fault plan says (" + FaultPlan{{*fault}}.to_string() + ")";
  if (fault->kind == Fault::Kind::kCrash) {
    const InjectedCrash crash(on_rank(rank, "crashed " + what + tag()));
    mark_failed(rank, std::make_exception_ptr(crash));
    throw crash;
  }
  hold(lock, rank, *fault);
  if (fault->kind == Fault::Kind::kNeverArrive) {
    throw InjectedHang(
        on_rank(rank, "never arrived " + what + "; every other rank has finished" + tag()));
  }
  return std::nullopt;
}

std::shared_ptr<GroupState> WorldState::group(const std::string& key,
                                              const std::vector<int>& global_ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = groups_[key];
  if (!slot) {
    slot = std::make_shared<GroupState>(
        *this, "[" + engine::dist::describe_ranks(global_ranks) + "]", global_ranks);
  }
  return slot;
}

}  // namespace sim
