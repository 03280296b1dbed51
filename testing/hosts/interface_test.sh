#!/usr/bin/env bash
# How a job over 2 emulated hosts picks each rank's address, as users meet it:
# GLOO_SOCKET_IFNAME naming each host's own interface works; NCCL's "^lo"
# syntax, and a hostname that resolves to 127.0.1.1 (Debian's /etc/hosts),
# end the job on every host at once with an error that says what to set (each
# rank checks before it meets the others; the first to fail ends the job: its
# node's launcher stops its siblings and tells the other node's), not with a
# wait for the timeout; and what it says to set works.
#   interface_test.sh ENGINE_LAUNCH MACHINE_PROBE
set -uo pipefail
here=$(dirname "$0")
launcher=$1 probe=$2
failures=0

# expect OUTCOME TEXT CASE: the last run passed (OUTCOME pass), or failed
# (OUTCOME fail) with TEXT in the output of each of the 2 hosts, or of one,
# where the other's launcher says it stopped for that failure.
run() { output=$(RUN_ON_HOSTS_TIMEOUT=120 bash "$here/run_on_hosts.sh" 2 2 "$launcher" "$probe" gloo 2>&1); status=$?; }
expect() {
  local outcome=$1 text=${2:-} case=$3
  if [[ $outcome == pass && $status != 0 ]] || [[ $outcome == fail && $status == 0 ]]; then
    echo "FAILED: $case: expected the job to $outcome; it exited $status:"; echo "$output"
    failures=$((failures + 1))
    return
  fi
  if [[ -n $text ]]; then
    local hosts
    hosts=$(awk -v text="$text" '/^=== host/ { host = $2 }
      index($0, text) || /ranks failed .*; stopping this node.s ranks/ { print host }' \
      <<<"$output" | sort -u | wc -l)
    grep -qF -- "$text" <<<"$output" || hosts=0
    if ((hosts != 2)); then
      echo "FAILED: $case: \"$text\" from $hosts of 2 hosts:"; echo "$output"
      failures=$((failures + 1))
      return
    fi
  fi
  echo "ok: $case"
}

RUN_ON_HOSTS_IFNAME=1 run
expect pass "" "GLOO_SOCKET_IFNAME=eth1 on host1 and eth2 on host2"

GLOO_SOCKET_IFNAME='^lo' run
expect fail "uses NCCL's syntax (^ excludes, = matches exactly), which Gloo does not know" \
  "GLOO_SOCKET_IFNAME=^lo"

EMULATED_HOSTS_LOOPBACK_NAME=1 run
expect fail "resolves to 127.0.1.1, a loopback address that the job's other machines cannot reach" \
  "hostnames that resolve to 127.0.1.1"

EMULATED_HOSTS_LOOPBACK_NAME=1 RUN_ON_HOSTS_IFNAME=1 run
expect pass "" "hostnames on 127.0.1.1 with GLOO_SOCKET_IFNAME set, as the error says"

exit $((failures > 0))
