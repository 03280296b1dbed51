#!/usr/bin/env bash
# engine-launch end to end: environment, a crashing rank, a hanging rank, a
# signal to the launcher. Every launch is bounded by `timeout`.
set -uo pipefail
launcher=$1
fake=$2
out=$(mktemp)
failures=0
fail() {
  echo "FAIL: $*"
  cat "$out"
  failures=$((failures + 1))
}

# Every rank gets torchrun's variables; output lines carry the rank.
timeout 60 "$launcher" --nproc-per-node 3 "$fake" ok > "$out" 2>&1
status=$?
[ $status = 0 ] || fail "ok: exit status $status"
for r in 0 1 2; do
  grep -q "^\[rank $r\] rank=$r local=$r world=3 local_world=3 group=0 addr=127.0.0.1 port=[1-9]" "$out" ||
    fail "ok: rank $r's environment"
done

# A crashing rank: the others are stopped and its status is the job's.
timeout 60 "$launcher" --nproc-per-node 3 "$fake" crash 1 7 > "$out" 2>&1
status=$?
[ $status = 7 ] || fail "crash: exit status $status, expected 7"
grep -q "rank 1 failed with status 7" "$out" || fail "crash: no report of rank 1"

# A rank that ignores SIGTERM is killed after the grace period.
timeout 60 "$launcher" --nproc-per-node 3 --grace-seconds 1 "$fake" hang 2 3 > "$out" 2>&1
status=$?
[ $status = 3 ] || fail "hang: exit status $status, expected 3"

# SIGTERM to the launcher reaches every rank; the job ends with 128+15.
timeout 60 "$launcher" --nproc-per-node 2 "$fake" wait > "$out" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ "$(grep -c ready "$out")" = 2 ] && break
  sleep 0.1
done
kill -TERM "$(pgrep -P $pid -f "$launcher" || echo $pid)" 2>/dev/null
wait $pid
status=$?
[ $status = 143 ] || fail "signal: exit status $status, expected 143"

# Bad arguments are refused with usage.
"$launcher" --nproc-per-node zero "$fake" ok > "$out" 2>&1
[ $? = 2 ] && grep -q "usage: engine-launch" "$out" || fail "bad arguments"

rm -f "$out"
echo "engine-launch: $((5 - failures)) passed, $failures failed"
[ $failures = 0 ]
