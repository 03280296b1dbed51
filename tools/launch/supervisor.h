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
int supervise(const Plan& plan);

}  // namespace launch
