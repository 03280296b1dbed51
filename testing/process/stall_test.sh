#!/usr/bin/env bash
# The watchdog (--stall-timeout 5), 3 ranks (stall_main.cc): engine-launch's
# on gloo, engine-watch's on mpi under mpirun. A stall ends the job with
# status 124 and a diagnosis that names the stuck rank, the flight records
# kept; on gloo, with --max-restarts 1 the restarted job completes (mpirun
# has no restarts); ranks that compute for longer than the timeout outside
# any call are not stalled. The timeout is generous so that a loaded
# machine's slow start is not taken for a stall. Every launch is bounded by
# `timeout`.
#   stall_test.sh gloo ENGINE_LAUNCH STALL_BIN
#   stall_test.sh mpi RUN_MPIRUN ENGINE_WATCH STALL_BIN
set -uo pipefail
backend=$1
if [ "$backend" = gloo ]; then
  launcher=("$2" --nproc-per-node 3 --stall-timeout 5) tool=engine-launch stall=$3
else
  launcher=(bash "$2" 3 "$3" --stall-timeout 5) tool=engine-watch stall=$4
fi
export TMPDIR=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() {
  echo "FAIL: $*"
  echo "$output"
  failures=$((failures + 1))
}
launch() {  # EXPECTED_STATUS ARGS...
  local expected=$1
  shift
  output=$(timeout 300 "${launcher[@]}" "$@" 2>&1)
  local status=$?
  [ $status = "$expected" ] || fail "$*: exit status $status, expected $expected"
}
expect() {
  grep -qF -- "$1" <<<"$output" || fail "no line with \"$1\""
}

launch 124 "$stall" "$backend"
expect "$tool: no rank of this node started or ended a call for 5 s while one was in a call"
expect "rank 2 has no call in flight (last: all_reduce #5 (group [0-2], 1 KiB Float[256], sum)) while ranks 0-1 are in all_reduce #6"
if [ "$backend" = gloo ]; then
  expect "engine-launch: the ranks stalled; stopping this node's ranks"
else
  expect "engine-watch: the ranks stalled; stopping rank 2"
fi
records=$(grep -o "the flight records are in .*" <<<"$output" | cut -d' ' -f6)
for r in 0 1 2; do
  [ -f "$records/flight_rank$r.json" ] || fail "rank $r's flight record is not in \"$records\""
done

if [ "$backend" = gloo ]; then
  launch 0 --max-restarts 1 "$stall" gloo
  expect "restarting every rank (restart 1 of 1)"
  [ "$(grep -c "all 6 calls done" <<<"$output")" = 3 ] || fail "the restarted job did not complete"
fi

folders_before=$(ls -d "$TMPDIR"/$tool-*)
launch 0 "$stall" "$backend" computing 12
[ "$(grep -c "all 6 calls done" <<<"$output")" = 3 ] || fail "the computing job did not complete"
! grep -q "stalled" <<<"$output" || fail "ranks computing outside any call were taken for stalled"
[ "$(ls -d "$TMPDIR"/$tool-*)" = "$folders_before" ] ||
  fail "a job that did not stall left its watch folder behind"

echo "stall_test: $failures failures"
[ $failures = 0 ]
