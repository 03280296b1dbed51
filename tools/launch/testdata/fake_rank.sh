#!/usr/bin/env bash
# A stand-in rank for engine-launch's tests.
#   fake_rank.sh ok                 print the environment, exit 0
#   fake_rank.sh end K HOW          once the others are ready, rank K ends as HOW
#                                   says; the others wait
#   fake_rank.sh hang K CODE        rank 0 exits with CODE, rank K ignores SIGTERM
#   fake_rank.sh wait               every rank says "ready" and waits
#   fake_rank.sh wait-until N       on the attempts before N, as `wait` (its pid
#                                   in its pid file); from attempt N on, exits 0
#   fake_rank.sh fail-until N K HOW on the attempts (TORCHELASTIC_RESTART_COUNT)
#                                   before N, as `end K HOW`; from attempt N
#                                   on, every rank exits 0
#   fake_rank.sh leave K CODE       rank K starts two sleeps, one in its
#                                   process group and one in a session of its
#                                   own, writes their pids to
#                                   $TEST_TMPDIR/left_K.pids and exits with
#                                   CODE; with CODE 0 the others exit 0, else
#                                   they wait
# HOW: exit:CODE; signal:NAME (it kills itself: KILL, as the kernel's
# out-of-memory killer does, SEGV, ABRT); quiet:CODE (closes its stdout and
# stderr, runs on, then exits with CODE). When rank K ends with 0 the others
# exit 0 once the launcher has reaped it (its pid is gone); otherwise they
# wait to be stopped and say so when SIGTERM comes.
# Waiting ranks sleep at most 120 s, so a launcher that fails to stop them
# shows as a slow test, never as a hang.
set -u
mode=$1
echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE local_world=$LOCAL_WORLD_SIZE group=$GROUP_RANK addr=$MASTER_ADDR port=$MASTER_PORT attempt=$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS"
if [ "$mode" = wait-until ]; then
  [ "$TORCHELASTIC_RESTART_COUNT" -ge "$2" ] && exit 0
  echo $$ >"$TEST_TMPDIR/fake_rank_${TORCHELASTIC_RESTART_COUNT}_$RANK.pid"
  mode=wait
fi
if [ "$mode" = fail-until ]; then
  [ "$TORCHELASTIC_RESTART_COUNT" -ge "$2" ] && exit 0
  mode=end
  shift
fi
wait_long() {
  sleep 120 &
  wait $!
}
# Marks are per attempt: a restarted rank must not see the last one's.
pid_file() { echo "$TEST_TMPDIR/fake_rank_${TORCHELASTIC_RESTART_COUNT}_$1.pid"; }
end_as() {
  echo $$ > "$(pid_file "$RANK").tmp" && mv "$(pid_file "$RANK").tmp" "$(pid_file "$RANK")"
  case "$1" in
    exit:*) exit "${1#exit:}" ;;
    signal:*) kill -s "${1#signal:}" $$ ;;
    quiet:*)
      exec >&- 2>&-
      sleep 0.2
      exit "${1#quiet:}" ;;
  esac
  exit 99  # a signal that did not end it
}
ready_file() { echo "$TEST_TMPDIR/fake_rank_${TORCHELASTIC_RESTART_COUNT}_$1.ready"; }
# Returns once every other rank has set its SIGTERM trap, within 120 s: a
# rank stopped before that would end without saying so.
await_others_ready() {
  for r in $(seq 0 $((WORLD_SIZE - 1))); do
    [ "$r" = "$RANK" ] && continue
    for _ in $(seq 2400); do
      [ -f "$(ready_file "$r")" ] && continue 2
      sleep 0.05
    done
    return 1
  done
}
# Returns once rank $1's process is gone (reaped, not a zombie), within 120 s.
await_reaped() {
  for _ in $(seq 2400); do
    if [ -f "$(pid_file "$1")" ] && ! kill -0 "$(cat "$(pid_file "$1")")" 2> /dev/null; then
      return 0
    fi
    sleep 0.05
  done
  return 1
}
case "$mode" in
  ok) exit 0 ;;
  end)
    if [ "$RANK" = "$2" ]; then
      await_others_ready || exit 97
      end_as "$3"
    fi
    trap 'echo "stopped by SIGTERM"; exit 143' TERM
    touch "$(ready_file "$RANK")"
    echo ready
    if [ "${3#*:}" = 0 ]; then
      await_reaped "$2" || exit 98
      # A launcher that stops the others when a rank succeeds does so as it
      # reaps it: give its SIGTERM time to arrive.
      sleep 1
      exit 0
    fi
    wait_long ;;
  hang)
    [ "$RANK" = 0 ] && exit "$3"
    [ "$RANK" = "$2" ] && trap '' TERM
    wait_long ;;
  wait)
    echo ready
    wait_long ;;
  leave)
    if [ "$RANK" = "$2" ]; then
      sleep 300 &
      in_group=$!
      setsid sleep 300 &
      echo "$in_group $!" >"$TEST_TMPDIR/left_$RANK.pids"
      exit "$3"
    fi
    [ "$3" = 0 ] && exit 0
    wait_long ;;
esac
