#pragma once

#include "tools/launch/launch_plan.h"

namespace launch {

// Starts every local rank of `plan` with torchrun's variables, relays their
// output line by line prefixed with "[rank R] ", and returns the job's exit
// status: 0 when every rank exited 0; otherwise the first failing rank's
// (its exit code, or 128 + the signal that ended it), after the others were
// stopped: SIGTERM, then SIGKILL once plan.grace_seconds passed. SIGINT and
// SIGTERM sent to the launcher are forwarded to every rank (and end the job
// the same way). Waits block in poll(); nothing spins.
struct Outcome {
  int status = 0;
  bool interrupted = false;  // the launcher was sent SIGINT or SIGTERM
};
Outcome supervise(const Plan& plan);

// supervise, again after a failure while plan.max_restarts allow, each
// attempt with its TORCHELASTIC_RESTART_COUNT and, unless the port was
// given, a fresh rendezvous port: a new store, with no key of the failed
// attempt. A job stopped by a signal to the launcher is not restarted.
// Returns the last attempt's status.
int supervise_with_restarts(Plan plan);

}  // namespace launch
