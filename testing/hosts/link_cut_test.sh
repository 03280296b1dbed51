#!/usr/bin/env bash
# A cable pulled mid-collective: 2 hosts x 2 tasks (srun_on_hosts.sh) run
# all_reduce after all_reduce on gloo with a 10 s timeout (long enough for a
# loaded machine to start every task); once they are in the loop, host2's
# cable is pulled. Every task, on both sides of the cut, must end with a
# Timeout or a PeerFailure within the timeout (link_cut_main exits 3 then),
# not hang.
#   link_cut_test.sh LINK_CUT
set -euo pipefail
mark="${TEST_TMPDIR:-$(mktemp -d)}/in_the_loop"
rm -f "$mark"
SRUN_ON_HOSTS_STATUS=3 SRUN_ON_HOSTS_DURING="await_file '$mark' 120 && link_down 2" \
  exec bash "$(dirname "$0")/srun_on_hosts.sh" 2 2 "$1" gloo "$mark" 10000
