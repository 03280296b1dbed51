#!/usr/bin/env bash
# A host lost for good, and the job goes on without it. The demo on 2
# emulated hosts x 1 rank under engine-launch --nnodes 1:2 --max-restarts 1,
# a checkpoint every 200 iterations and a 10 s timeout for collectives. Once
# host1's rank saved iter_200.pth, host2's cable is pulled: host1's rank
# fails in a collective, its launcher restarts, and the next attempt starts
# without host2 after the last call (3 s). Host1 alone, at world size 1,
# resumes from the newest checkpoint and finishes the run, and still learns.
# Host2's launcher, cut off from the job's store, is stopped at the end.
# With SNAPSHOT_INTERVAL set, the ranks take a snapshot that often instead of
# checkpoints, the cable is pulled once host1's folder holds a committed one,
# and host1 resumes from the newest: under FULL_SHARD (SHARDING set) the
# shard host2 wrote comes from the copy host1's folder holds.
# With LOST_HOST=1 node 0 is the one lost: engine-store hosts the job's store
# on a third host (--store external), host1's cable is pulled, and host2
# goes on alone the same ways (under FULL_SHARD, with the copy of host1's
# shard that host2's folder holds).
#   [LOST_HOST=1|2] [SNAPSHOT_INTERVAL=N] [SHARDING=FULL_SHARD]
#   lose_host_test.sh TRAIN CONFIG ENGINE_LAUNCH [ENGINE_STORE]
set -euo pipefail
source "$(dirname "$0")/emulated_hosts.sh"
source "$TEST_SRCDIR/$TEST_WORKSPACE/examples/test_lib.sh"
train=$1 config=$2 launcher=$3 store=${4:-}
lost=${LOST_HOST:-2} survivor=$((3 - ${LOST_HOST:-2}))
work="${TEST_TMPDIR:-$(mktemp -d)}/lose_host"
rm -rf "$work" && mkdir -p "$work"
strategy='{"type": "DDPStrategy", "sync_bn": "torch", "seed": 2026,
  "model_wrapper": {"type": "MMDistributedDataParallel"}, "timeout_s": 10}'
[[ -z ${SHARDING:-} ]] || strategy='{"type": "FSDPStrategy", "sync_bn": "torch", "seed": 2026,
  "model_wrapper": {"sharding_strategy": "'$SHARDING'"}, "timeout_s": 10}'
config=$(with_strategy "$config" "$strategy" "$work")
saving=(--checkpoint-interval 200) resumed_from="$work/run/iter_[0-9]*.pth"
if [[ -n ${SNAPSHOT_INTERVAL:-} ]]; then
  saving=(--checkpoint-interval 100000 --snapshot-interval "$SNAPSHOT_INTERVAL")
  resumed_from=".*/engine-launch-[A-Za-z0-9]*/snapshot_iter_[0-9]*.pth"
fi
# Waits (at most 60 s) until the run saved its state once: iter_200.pth, or
# a committed snapshot in host1's memory.
await_saved() {
  if [[ -z ${SNAPSHOT_INTERVAL:-} ]]; then
    await_file "$work/run/iter_200.pth" 60
    return
  fi
  local tries=1200
  until on_host 1 sh -c 'cat /dev/shm/engine-launch-*/COMMITTED' >/dev/null 2>&1; do
    ((tries-- > 0)) || return 1
    sleep 0.05
  done
}
store_at=(--master-addr "$(host_address 1)")
if ((lost == 1)); then
  hosts_up 3
  store_at=(--store external --master-addr "$(host_address 3)")
  start_logged store on_host 3 timeout -k 10 150 "$store" --port 29500
else
  hosts_up 2
fi
for host in 1 2; do
  start_logged "host$host" on_host "$host" timeout -k 10 120 "$launcher" \
    --nnodes 1:2 --node-rank $((host - 1)) --nproc-per-node 1 --max-restarts 1 --last-call 3 \
    --join-timeout 20 "${store_at[@]}" --master-port 29500 \
    "$train" --config "$config" --launcher pytorch --backend gloo --iters 4000 \
    "${saving[@]}" --resume auto --work-dir "$work/run"
done
await_saved || { await_logged || true; echo "FAIL: the run saved nothing within 60 s"; exit 1; }
link_down "$lost"
jobs=("${EMULATED_HOSTS_JOBS[@]}")
((lost == 2)) || jobs=("${jobs[@]:1}")  # the store's comes first
survivor_status=0
wait "${jobs[survivor - 1]#*:}" || survivor_status=$?
kill -TERM "${jobs[lost - 1]#*:}" "${EMULATED_HOSTS_JOBS[0]#*:}" 2>/dev/null || true
wait "${jobs[lost - 1]#*:}" || true
survived=$(tr '\r' '\n' <"$EMULATED_HOSTS_DIR/log.host$survivor")
echo "$survived"
echo "=== host$lost"
cat "$EMULATED_HOSTS_DIR/log.host$lost"
((survivor_status == 0)) || { echo "FAIL: host$survivor's launcher exited $survivor_status"; exit 1; }
expect "engine-launch: rank [0-9] failed with status" "$survived"
expect "restarting every rank (restart 1 of 1)" "$survived"
expect "attempt 1 runs on 1 of 2 nodes (world size 1)" "$survived"
expect "resumed from $resumed_from at iteration [0-9]*" "$survived"
expect "parameters and buffers identical on all 1 ranks" "$survived"
accuracy=$(grep -o 'final val accuracy [0-9.]*' <<<"$survived" | grep -o '[0-9.]*$')
python3 -c "import sys; sys.exit(0 if float('$accuracy') >= 0.8 else 1)" ||
  { echo "FAIL: accuracy $accuracy after going on alone"; exit 1; }
echo "PASS: host$survivor went on alone at world size 1 and reached accuracy $accuracy"
