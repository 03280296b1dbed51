#pragma once

#include <atomic>
#include <functional>

namespace engine::dist::gloo {

// How the adapter's synchronous pairs wait for a message: blocked in the
// kernel, or spinning on the socket (Gloo's busy poll). They spin only while
// some caller is blocked waiting for a call on them, and only where the
// machine has a core for each of its ranks.
//
// Why: a thread that blocks between messages idles its core, and on a VM an
// idle core goes back to the hypervisor, which takes tens of microseconds to
// wake it for the next message, and every message of a call pays it.
// Spinning only while the caller waits keeps the spin off the core the
// caller's own work needs (DDP's backward, while its first buckets are
// reduced); with more ranks than cores a spinning rank would take the core
// its peer needs to send, so it never spins there.
//
// A spin lasts at most 200 us without new bytes, then waits in poll()
// (third_party/gloo's pair.cc): a machine busy with other work takes the
// core back from a spinning rank by a time slice, so an unbounded spin
// there delayed the message it waited for.
//
// A wait that times out leaves the call spinning until it ends or Gloo's own
// timeout ends it (the pairs change mode only between messages).
class ReadMode {
 public:
  using SetSpinning = std::function<void(bool spin)>;

  // `set_spinning` switches every pair; it runs on the serving thread.
  ReadMode(bool may_spin, SetSpinning set_spinning);

  // Lives on a caller's stack for as long as it waits for a call on the pairs.
  class Waiting {
   public:
    explicit Waiting(ReadMode& mode);
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    ReadMode& mode_;
  };

  // On the serving thread, between messages: puts the pairs in the mode that
  // the callers' waiting asks for now.
  void refresh();
  bool spinning() const { return spinning_; }

 private:
  const bool may_spin_;
  SetSpinning set_spinning_;
  std::atomic<int> waiting_{0};
  bool spinning_ = false;
};

}  // namespace engine::dist::gloo
