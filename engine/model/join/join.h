#pragma once

#include <optional>
#include <vector>

#include "engine/dist/group.h"

// PyTorch's Join (torch.distributed.algorithms.join) for uneven inputs:
// ranks that run out of batches early shadow the collectives of the ranks
// still training, until every rank has run out; then the wrappers bring the
// ranks that left early up to date.
namespace engine::model {

// What each training iteration the ranks still running agree on.
struct JoinRound {
  std::vector<bool> active;   // per rank of the group: still training
  bool synchronises = false;  // some active rank's backward is synchronised
  int active_count() const;
  // The highest rank still training: the source of whatever the iteration
  // broadcasts (buffers), since ranks that joined hold stale copies.
  int authoritative_rank() const;
};

// A wrapper that can train under Join (MMDistributedDataParallel).
class Joinable {
 public:
  virtual ~Joinable() = default;
  // The group the wrapper's collectives run on.
  virtual const dist::GroupPtr& join_group() const = 0;
  // On a rank that has joined: the collectives one iteration of the
  // others makes, with nothing of its own to contribute.
  virtual void shadow_iteration(const JoinRound& round) = 0;
  // Once every rank has joined, on every rank: copy the state of
  // `last_rank` (a rank among those that trained longest).
  virtual void finish_join(int last_rank) = 0;
  // On a rank about to join: whether it has what shadow_iteration needs.
  // When some rank has not, every rank's Join throws InvalidArgument naming
  // it, instead of shadowing.
  virtual bool can_shadow() const { return true; }
};

struct JoinOptions {
  // false: no rank joins early; Join changes nothing and makes no call.
  bool enable = true;
  // Throw a DistError on every rank, at the first iteration some rank does
  // not run, instead of shadowing (a loop that must not train unevenly).
  bool throw_on_early_termination = false;
};

// The context, on every rank of the joinables' group, around the loop:
//
//   Join join({ddp.get()});
//   for (const auto& batch : my_batches) ddp->train_step(batch, optim);
//   join.finish();
//
// While it lives (one per thread), each training forward of a joinable calls
// notify_join(): a rank that has not joined all-reduces that it is active
// (once per iteration: the first joinable's forward; the joinables must run
// on one group, and each forward once per iteration, in the order given).
// finish() is where a rank joins: it matches the others' notifications and
// shadows their iterations until every rank has joined, then calls
// finish_join. Collective; call it once, on every rank. A joinable that
// cannot shadow (can_shadow) makes every rank throw InvalidArgument at the
// first notification after it joined.
class Join {
 public:
  explicit Join(std::vector<Joinable*> joinables, JoinOptions options = {});
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  void finish();

 private:
  friend std::optional<JoinRound> notify_join(const Joinable& joinable, bool synchronises);
  // This rank's part in a round: training, joined, or joined without
  // what shadowing needs.
  enum class Part { kActive, kJoined, kCannotShadow };
  JoinRound exchange(Part part, bool synchronises);

  std::vector<Joinable*> joinables_;
  JoinOptions options_;
  dist::GroupPtr group_;
  JoinRound last_round_;
  int last_rank_ = -1;  // the authoritative rank of the last round with one
  bool finished_ = false;
};

// Called by a joinable at each training forward (with `synchronises`: its
// backward will be): the round every rank agreed on; nullopt outside a Join
// of this joinable (no call made). A DistError on every rank when some rank
// has joined and throw_on_early_termination is set.
std::optional<JoinRound> notify_join(const Joinable& joinable, bool synchronises);

// True on a thread whose rank has joined and is inside a shadow_iteration.
// A joinable that shadows by running its model with nothing at stake (the
// sharded wrappers: the last batch, the loss times zero) relies on layers
// that reduce over the group to add nothing of this rank's then
// (SyncBatchNorm's statistics).
bool shadowing();

// Marks this thread as shadowing while it lives (Join::finish around each
// shadow_iteration; tests).
class ShadowScope {
 public:
  ShadowScope();
  ~ShadowScope();
  ShadowScope(const ShadowScope&) = delete;
  ShadowScope& operator=(const ShadowScope&) = delete;

 private:
  bool previous_;
};

}  // namespace engine::model
