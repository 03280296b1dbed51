#!/usr/bin/env bash
# Runs a test binary in N processes on this machine with torchrun's variables
# (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
# MASTER_PORT); fails if any rank fails, and stops the others then.
#   run_local.sh N BINARY [ARGS...]
set -uo pipefail
ranks=$1
shift
port=$((20000 + (RANDOM * 7 + $$) % 40000))
pids=()
for ((rank = 0; rank < ranks; rank++)); do
  RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=$ranks LOCAL_WORLD_SIZE=$ranks GROUP_RANK=0 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" 2>&1 | sed "s/^/[rank $rank] /" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  if ! wait "$pid"; then
    status=1
    kill "${pids[@]}" 2>/dev/null
  fi
done
exit $status
