#!/usr/bin/env bash
# engine-launch end to end: the environment; every way a rank can end (exit
# codes, each fatal signal, closing its output early) and what that does to
# the job's status and to the other ranks; a rank that ignores SIGTERM; the
# processes a rank leaves running; a signal to the launcher; engine-store's
# refusals. Every launch is bounded by `timeout`.
set -uo pipefail
launcher=$1
fake=$2
store=$3
out=$(mktemp)
export TEST_TMPDIR=${TEST_TMPDIR:-$(mktemp -d)}
checks=0
failures=0
fail() {
  echo "FAIL: $*"
  cat "$out"
  failures=$((failures + 1))
}
# launch CASE EXPECTED_STATUS ARGS...: runs engine-launch ARGS into $out.
launch() {
  local name=$1 expected=$2
  shift 2
  checks=$((checks + 1))
  rm -f "$TEST_TMPDIR"/fake_rank_*
  timeout 60 "$launcher" "$@" > "$out" 2>&1
  local status=$?
  [ $status = "$expected" ] || fail "$name: exit status $status, expected $expected"
}
expect_line() {  # CASE PATTERN
  grep -q "$2" "$out" || fail "$1: no line matching '$2'"
}
expect_no_line() {  # CASE PATTERN
  ! grep -q "$2" "$out" || fail "$1: a line matching '$2'"
}
# The ranks other than $2 of $3 were stopped by the launcher's SIGTERM.
expect_others_stopped() {
  for r in $(seq 0 $(($3 - 1))); do
    [ "$r" = "$2" ] || expect_line "$1" "^\[rank $r\] stopped by SIGTERM"
  done
}

# Every rank gets torchrun's variables; output lines carry the rank.
launch ok 0 --nproc-per-node 3 "$fake" ok
for r in 0 1 2; do
  expect_line ok "^\[rank $r\] rank=$r local=$r world=3 local_world=3 group=0 addr=127.0.0.1 port=[1-9]"
done

# A rank that fails: its status is the job's, it is named, the others stopped.
launch "exit 7" 7 --nproc-per-node 3 "$fake" end 1 exit:7
expect_line "exit 7" "rank 1 failed with status 7; stopping the others"
expect_others_stopped "exit 7" 1 3

# A rank killed by a signal: 128 + the signal, named, the others stopped.
for signal in KILL:9 SEGV:11 ABRT:6; do
  name=${signal%:*}
  number=${signal#*:}
  launch "SIG$name" $((128 + number)) --nproc-per-node 3 "$fake" end 2 "signal:$name"
  expect_line "SIG$name" "rank 2 was killed by signal $number (SIG$name)"
  expect_others_stopped "SIG$name" 2 3
  expect_no_line "SIG$name" "rank [01] failed"  # stopped ranks are not failures
  [ $name != KILL ] || expect_line SIGKILL "the kernel's out-of-memory killer sends SIGKILL"
done

# A rank that succeeds early stops nobody: the others run to their own end.
launch "early exit 0" 0 --nproc-per-node 3 "$fake" end 0 exit:0
expect_no_line "early exit 0" "stopped by SIGTERM"
expect_no_line "early exit 0" "engine-launch:"

# A rank that closes its output is still supervised: its exit decides.
launch "quiet, then 5" 5 --nproc-per-node 2 "$fake" end 1 quiet:5
expect_line "quiet, then 5" "^\[rank 1\] rank=1 "
expect_line "quiet, then 5" "rank 1 failed with status 5"
expect_others_stopped "quiet, then 5" 1 2
launch "quiet, then 0" 0 --nproc-per-node 2 "$fake" end 1 quiet:0
expect_no_line "quiet, then 0" "stopped by SIGTERM"

# A rank that ignores SIGTERM is killed after the grace period.
launch hang 3 --nproc-per-node 3 --grace-seconds 1 "$fake" hang 2 3

# Whatever a rank leaves running is gone when the job ends, whether it stayed
# in the rank's process group or left it, after a success and after a
# failure.
for code in 0 3; do
  launch "leftovers, status $code" $code --nproc-per-node 2 "$fake" leave 1 $code
  for pid in $(cat "$TEST_TMPDIR/left_1.pids"); do
    ! kill -0 "$pid" 2>/dev/null || fail "leftovers, status $code: process $pid still runs"
  done
  rm -f "$TEST_TMPDIR/left_1.pids"
done

# SIGTERM to the launcher reaches every rank; the job ends with 128+15.
checks=$((checks + 1))
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

# Restarts: a job that fails on its first two attempts and succeeds on the
# third ends 0 with --max-restarts 2; every attempt is numbered, starts every
# rank afresh and is said.
launch "restarts" 0 --nproc-per-node 2 --max-restarts 2 "$fake" fail-until 2 1 exit:7
for attempt in 0 1 2; do
  for r in 0 1; do
    expect_line restarts "^\[rank $r\] rank=$r .* attempt=$attempt/2$"
  done
done
expect_line restarts "restarting every rank (restart 1 of 2)"
expect_line restarts "restarting every rank (restart 2 of 2)"
expect_others_stopped restarts 1 2
# Once the restarts are spent the job ends with the last failure's status,
# after exactly 1 + N attempts.
launch "restarts spent" 9 --nproc-per-node 2 --max-restarts 1 "$fake" fail-until 5 0 exit:9
[ "$(grep -c '^\[rank 0\] rank=0 ' "$out")" = 2 ] || fail "restarts spent: not 2 attempts"
expect_line "restarts spent" "the job failed with status 9 after 1 restart$"
# A signal-killed rank is a failure like any other.
launch "restart after SIGKILL" 0 --nproc-per-node 2 --max-restarts 1 "$fake" fail-until 1 1 signal:KILL
expect_line "restart after SIGKILL" "rank 1 was killed by signal 9"
expect_line "restart after SIGKILL" "^\[rank 1\] rank=1 .* attempt=1/1$"
# Without --max-restarts nothing restarts.
launch "no restarts" 7 --nproc-per-node 2 "$fake" fail-until 1 1 exit:7
expect_no_line "no restarts" "restarting"

# Two nodes: launch_nodes CASE EXPECTED_STATUS ARGS... runs engine-launch ARGS
# as node 0 and node 1 of one job, in a network namespace of their own (so
# that port 29500 is free), into $out.0 and $out.1, and both into $out.
launch_nodes() {
  local name=$1 expected=$2
  shift 2
  checks=$((checks + 1))
  rm -f "$TEST_TMPDIR"/fake_rank_*
  unshare -n bash -c '
    ip link set lo up
    out=$1 launcher=$2
    shift 2
    for node in 0 1; do
      timeout 60 "$launcher" --nnodes 2 --node-rank $node --master-port 29500 "$@" >"$out.$node" 2>&1 &
      pids[node]=$!
    done
    for node in 0 1; do wait ${pids[node]}; echo $? >"$out.status$node"; done' \
    _ "$out" "$launcher" "$@"
  cat "$out.0" "$out.1" >"$out"
  local statuses
  statuses="$(cat "$out.status0") $(cat "$out.status1")"
  [ "$statuses" = "$expected $expected" ] ||
    fail "$name: exit statuses $statuses, expected $expected on both nodes"
}
attempts_of() {  # RANK: how many attempts it ran
  grep -c "^\[rank $1\] rank=$1 " "$out"
}
launch_nodes "2 nodes" 0 --nproc-per-node 2 "$fake" ok
for r in 0 1 2 3; do
  expect_line "2 nodes" "^\[rank $r\] rank=$r local=$((r % 2)) world=4 local_world=2 group=$((r / 2)) "
done
# A rank that fails on node 1 stops node 0's ranks at once, rather than
# leaving them to wait in a collective until its timeout; both nodes end with
# its status.
launch_nodes "a failure on another node" 7 --nproc-per-node 2 "$fake" end 3 exit:7
grep -q "node 1's ranks failed (status 7); stopping this node's ranks" "$out.0" ||
  fail "a failure on another node: node 0 does not say why it stopped"
expect_others_stopped "a failure on another node" 3 4
# Restarts are counted for the job, not per node: a failure on node 1 seen
# by both restarts every rank once, 1 + 2 attempts in all.
launch_nodes "restarts on 2 nodes" 0 --nproc-per-node 2 --max-restarts 2 "$fake" fail-until 2 3 exit:7
for r in 0 1 2 3; do
  [ "$(attempts_of $r)" = 3 ] || fail "restarts on 2 nodes: rank $r ran $(attempts_of $r) attempts, not 3"
  expect_line "restarts on 2 nodes" "^\[rank $r\] rank=$r .* attempt=2/2$"
done
for node in 0 1; do
  grep -q "restarting every rank (restart 2 of 2)" "$out.$node" ||
    fail "restarts on 2 nodes: node $node does not say it restarts"
done
launch_nodes "restarts spent on 2 nodes" 9 --nproc-per-node 1 --max-restarts 1 "$fake" fail-until 5 0 exit:9
[ "$(attempts_of 1)" = 2 ] || fail "restarts spent on 2 nodes: rank 1 ran $(attempts_of 1) attempts"
for node in 0 1; do
  grep -q "the job failed with status 9 after 1 restart$" "$out.$node" ||
    fail "restarts spent on 2 nodes: node $node does not say the restarts are spent"
done
# A launcher started again cannot rejoin the attempt its node left (so a
# node that exits and rejoins quickly cannot escape --max-restarts), and a
# signal to one node's launcher ends the job on both without a restart.
checks=$((checks + 1))
rm -f "$TEST_TMPDIR"/fake_rank_*
unshare -n bash -c '
  ip link set lo up
  out=$1 launcher=$2 fake=$3
  for node in 0 1; do
    timeout 60 "$launcher" --nnodes 2 --node-rank $node --master-port 29500 --nproc-per-node 1 \
      --max-restarts 1 "$fake" wait >"$out.$node" 2>&1 &
    pids[node]=$!
  done
  for _ in $(seq 1200); do
    [ "$(cat "$out.0" "$out.1" | grep -c "ready$")" = 2 ] && break
    sleep 0.05
  done
  timeout 60 "$launcher" --nnodes 2 --node-rank 1 --master-port 29500 "$fake" ok >"$out.again" 2>&1
  echo $? >"$out.status_again"
  kill -TERM ${pids[0]}
  for node in 0 1; do wait ${pids[node]}; echo $? >"$out.status$node"; done' \
  _ "$out" "$launcher" "$fake"
cat "$out.0" "$out.1" "$out.again" >"$out"
[ "$(cat "$out.status_again")" = 2 ] || fail "rejoin: the second node 1 exited $(cat "$out.status_again")"
expect_line "rejoin" "node 1 already joined attempt 0 of this job (launcher pid [0-9]* on "
[ "$(cat "$out.status0") $(cat "$out.status1")" = "143 143" ] ||
  fail "a signal on 2 nodes: exit statuses $(cat "$out.status0") $(cat "$out.status1"), not 143 on both"
grep -q "node 0's launcher was interrupted; stopping this node's ranks" "$out.1" ||
  fail "a signal on 2 nodes: node 1 does not say why it stopped"
expect_no_line "a signal on 2 nodes" "restarting"
# Node 0's launcher killed outright (SIGKILL: no word to anyone): node 1
# loses the job's store, stops its rank and fails, rather than leaving it
# running with nobody to stop it. In a PID namespace of its own, so that the
# rank the killed launcher leaves behind goes with the namespace (and the
# whole case is bounded by one timeout).
checks=$((checks + 1))
timeout 60 unshare -n -p -f -m --mount-proc bash -c '
  ip link set lo up
  out=$1 launcher=$2 fake=$3
  for node in 0 1; do
    "$launcher" --nnodes 2 --node-rank $node --master-port 29500 --nproc-per-node 1 \
      "$fake" wait >"$out.$node" 2>&1 &
    pids[node]=$!
  done
  for _ in $(seq 1200); do
    [ "$(cat "$out.0" "$out.1" | grep -c "ready$")" = 2 ] && break
    sleep 0.05
  done
  kill -KILL ${pids[0]}
  wait ${pids[1]}
  echo $? >"$out.status1"
  pgrep -fc "$fake wait" >"$out.ranks_left"' \
  _ "$out" "$launcher" "$fake"
cp "$out.1" "$out"
[ "$(cat "$out.status1")" = 2 ] || fail "store lost: node 1 exited $(cat "$out.status1"), not 2"
expect_line "store lost" "lost the job's store: .*; stopping this node's ranks"
[ "$(cat "$out.ranks_left")" = 1 ] ||
  fail "store lost: $(cat "$out.ranks_left") ranks left, not 1 (node 0's, whose launcher was killed)"

# A node lost for good, with --nnodes 1:2: node 1's launcher and rank are
# SIGKILLed while node 0's rank waits. Node 0's launcher notices the
# heartbeats stop (--heartbeat-timeout), stops its rank, restarts, waits
# --last-call for node 1, and runs the next attempt alone at world size 1.
# Then with --nnodes 2 and node 0's rank done: node 0's launcher, waiting
# for node 1's outcome, gets a failure instead of waiting for ever.
lose_node_1() {  # NNODES NODE0_MODE RESTARTS: node 0's status into $out.status0
  rm -f "$TEST_TMPDIR"/fake_rank_*
  timeout 60 unshare -n -p -f -m --mount-proc bash -c '
    ip link set lo up
    out=$1 launcher=$2 fake=$3 nnodes=$4 node0_mode=$5 restarts=$6
    for node in 0 1; do
      mode=wait-until
      [ $node = 0 ] && mode=$node0_mode
      "$launcher" --nnodes $nnodes --node-rank $node --master-port 29500 --nproc-per-node 1 \
        --max-restarts $restarts --last-call 1 --heartbeat-timeout 2 "$fake" $mode 1 \
        >"$out.$node" 2>&1 &
      pids[node]=$!
    done
    for _ in $(seq 1200); do
      [ -f "$TEST_TMPDIR/fake_rank_0_1.pid" ] && grep -q "rank=0 " "$out.0" && break
      sleep 0.05
    done
    kill -KILL ${pids[1]} "$(cat "$TEST_TMPDIR/fake_rank_0_1.pid")"
    wait ${pids[0]}
    echo $? >"$out.status0"' \
    _ "$out" "$launcher" "$fake" "$@"
  cp "$out.0" "$out"
}
checks=$((checks + 1))
lose_node_1 1:2 wait-until 1
[ "$(cat "$out.status0")" = 0 ] || fail "node lost: node 0 exited $(cat "$out.status0"), not 0"
expect_line "node lost" "^\[rank 0\] rank=0 local=0 world=2 .* attempt=0/1$"
expect_line "node lost" "node 1's launcher went silent (no heartbeat within --heartbeat-timeout); stopping this node's ranks"
expect_line "node lost" "attempt 1 starts without the nodes that did not join (node(s) 1 did not join"
expect_line "node lost" "attempt 1 runs on 1 of 2 nodes (world size 1)"
expect_line "node lost" "^\[rank 0\] rank=0 local=0 world=1 local_world=1 group=0 .* attempt=1/1$"
checks=$((checks + 1))
lose_node_1 2 ok 0
[ "$(cat "$out.status0")" = 1 ] || fail "node lost after success: node 0 exited $(cat "$out.status0"), not 1"
expect_line "node lost after success" "engine-launch: node 1's launcher went silent"
expect_no_line "node lost after success" "restarting"

# A node cut off in the middle of a request to node 0's store (the first
# byte of an add, then silence, as when its cable is pulled) delays no other
# node: node 0 runs the job alone under --nnodes 1:2 and ends 0. (LibTorch
# 1.13's own store server would wait for the rest of that request, and node
# 0's launcher with it until the timeout.)
checks=$((checks + 1))
timeout 60 unshare -n bash -c '
  ip link set lo up
  out=$1 launcher=$2 fake=$3
  "$launcher" --nnodes 1:2 --node-rank 0 --master-port 29500 --nproc-per-node 1 --last-call 1 \
    "$fake" ok >"$out.0" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do
    exec 3<>/dev/tcp/127.0.0.1/29500 && break
    sleep 0.05
  done 2>/dev/null
  printf "\x03" >&3
  wait $pid
  echo $? >"$out.status0"' _ "$out" "$launcher" "$fake"
cp "$out.0" "$out"
[ "$(cat "$out.status0")" = 0 ] || fail "cut off mid-request: node 0 exited $(cat "$out.status0"), not 0"
expect_line "cut off mid-request" "attempt 0 starts without the nodes that did not join (node(s) 1 did not join"
expect_line "cut off mid-request" "^\[rank 0\] rank=0 local=0 world=1 "

# Bad arguments are refused with usage.
launch "bad arguments" 2 --nproc-per-node zero "$fake" ok
expect_line "bad arguments" "usage: engine-launch"

# --store external with no engine-store listening: an error that names it
# once the join timeout is spent. engine-store refuses a bad port, and a
# port another one holds.
checks=$((checks + 3))
timeout 60 unshare -n bash -c '
  ip link set lo up
  launcher=$1 fake=$2 store=$3 out=$4
  "$launcher" --store external --master-port 29500 --join-timeout 1 "$fake" ok >"$out" 2>&1
  echo $? >"$out.status"
  "$store" --port 0 >"$out.bad" 2>&1
  echo $? >>"$out.status"
  "$store" --port 29500 2>/dev/null &
  holder=$!
  for _ in $(seq 1200); do
    exec 3<>/dev/tcp/127.0.0.1/29500 && break
    sleep 0.05
  done 2>/dev/null
  exec 3>&-
  "$store" --port 29500 >"$out.busy" 2>&1
  echo $? >>"$out.status"
  kill -TERM $holder
  wait $holder
  echo $? >>"$out.status"' _ "$launcher" "$fake" "$store" "$out"
[ "$(tr '\n' ' ' <"$out.status")" = "2 2 2 0 " ] ||
  fail "engine-store: exit statuses $(tr '\n' ' ' <"$out.status"), expected 2 2 2 0"
expect_line "no engine-store" "cannot reach the job's store (engine-store) at 127.0.0.1:29500 within 1 s"
grep -q "usage: engine-store --port PORT" "$out.bad" || fail "engine-store --port 0: no usage"
grep -q "cannot host the job's store on port 29500" "$out.busy" ||
  fail "engine-store on a busy port: no error naming it"

rm -f "$out" "$out".*
echo "engine-launch: $checks launches, $failures failures"
[ $failures = 0 ]
