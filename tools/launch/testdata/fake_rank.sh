#!/usr/bin/env bash
# A stand-in rank for engine-launch's tests.
#   fake_rank.sh ok                 print the environment, exit 0
#   fake_rank.sh crash K CODE       rank K exits with CODE, the others wait
#   fake_rank.sh hang K CODE        rank 0 exits with CODE, rank K ignores SIGTERM
#   fake_rank.sh wait               every rank says "ready" and waits
# Waiting ranks sleep at most 120 s, so a launcher that fails to stop them
# shows as a slow test, never as a hang.
set -u
mode=$1
echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE local_world=$LOCAL_WORLD_SIZE group=$GROUP_RANK addr=$MASTER_ADDR port=$MASTER_PORT"
wait_long() {
  sleep 120 &
  wait $!
}
case "$mode" in
  ok) exit 0 ;;
  crash)
    [ "$RANK" = "$2" ] && exit "$3"
    wait_long ;;
  hang)
    [ "$RANK" = 0 ] && exit "$3"
    [ "$RANK" = "$2" ] && trap '' TERM
    wait_long ;;
  wait)
    echo ready
    wait_long ;;
esac
