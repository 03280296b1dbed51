#!/usr/bin/env bash
# A crash and a restart that loses nothing. The demo on 2 gloo processes under
# LAUNCHER (engine-launch and its flags for the ranks of one machine, or
# testing/hosts/run_on_hosts.sh for ranks on several), 60 iterations with a
# checkpoint every 20: once without a fault; once with --max-restarts 1 and
# the last rank killed (SIGKILL) as it draws its 45th batch, so that both
# ranks restart and resume from iter_40.pth (--resume auto). Both runs must
# end with the same parameters (their CRC-32) and the same validation
# accuracy.
# With SEED set, the kill comes at a batch (2-59) and a snapshot is taken
# every 1-3 iterations (--snapshot-interval), both picked by SEED: the ranks
# must resume from the newest state saved, the snapshot in the launcher's
# folder when it is newer than the checkpoint, and the launcher must remove
# that folder when the job ends. With OVERLAP=1 as well, the snapshots are
# written beside the next iteration (--snapshot-overlap 1), each committed
# once that iteration ends. STRATEGY (JSON), if set, replaces the config's
# strategy.
#   [SEED=N [OVERLAP=1]] [STRATEGY=JSON] restart_test.sh TRAIN CONFIG LAUNCHER...
set -euo pipefail
# Under Bazel the script may run from another package's folder.
examples=$(dirname "$0")
[[ -z ${TEST_SRCDIR:-} ]] || examples=$TEST_SRCDIR/$TEST_WORKSPACE/examples
source "$examples/test_lib.sh"
train=$1 config=$2
shift 2
launcher=("$@")
work="${TEST_TMPDIR:-$(mktemp -d)}"
rm -rf "$work/clean" "$work/restarted"
config=$(with_strategy "$config" "${STRATEGY:-}" "$work")
kill_at=45 saving=()
if [[ -n ${SEED:-} ]]; then
  RANDOM=$SEED
  kill_at=$((2 + RANDOM % 58))
  every=$((1 + RANDOM % 3))
  saving=(--snapshot-interval "$every")
  [[ ${OVERLAP:-0} != 1 ]] || saving+=(--snapshot-overlap 1)
fi
run() {  # WORK_DIR [FLAGS...]: the flags go to the launcher (--max-restarts) or the demo
  local dir=$1 launcher_flags=() train_flags=()
  shift
  [ $# = 0 ] || launcher_flags=("$1" "$2") train_flags=("$3" "$4")
  timeout 300 "${launcher[@]}" "${launcher_flags[@]}" "$train" --config "$config" \
    --launcher pytorch --backend gloo --iters 60 --checkpoint-interval 20 "${saving[@]}" \
    --resume auto --work-dir "$dir" "${train_flags[@]}" 2>&1 | tr '\r' '\n'
}
ending() {  # the parameters' CRC-32 and the accuracy, as one line
  echo "$(grep -o 'crc32 [0-9a-f]*' <<<"$1") $(grep -o 'final val accuracy [0-9.]*' <<<"$1")"
}

clean=$(run "$work/clean")
expect "parameters and buffers identical on all 2 ranks" "$clean"
restarted=$(run "$work/restarted" --max-restarts 1 --fail-after-batches "$kill_at")
echo "$restarted"
expect "rank 1 was killed by signal 9" "$restarted"
expect "restarting every rank (restart 1 of 1)" "$restarted"
done_iters=$((kill_at - 1))
checkpoint=$((done_iters / 20 * 20))
committed=$((${OVERLAP:-0} == 1 ? done_iters - 1 : done_iters))  # the last snapshot's commit
snapshot=$((${every:-0} > 0 ? committed / every * every : 0))
if ((snapshot > checkpoint)); then
  expect "snapshots took" "$clean"
  expect "resumed from .*/engine-launch-[A-Za-z0-9]*/snapshot_iter_$snapshot.pth at iteration $snapshot," "$restarted"
  folder=$(grep -o "resumed from [^ ]*/snapshot_iter_" <<<"$restarted" | sed 's/^resumed from //; s/\/snapshot_iter_$//')
  [[ ! -e $folder ]] || { echo "FAIL: the launcher left its snapshot folder $folder"; exit 1; }
  resumed_at=$snapshot
elif ((checkpoint > 0)); then
  expect "resumed from $work/restarted/iter_$checkpoint.pth at iteration $checkpoint," "$restarted"
  resumed_at=$checkpoint
else
  resumed_at=0
fi
expect "trained from iteration $resumed_at;" "$restarted"
expect "parameters and buffers identical on all 2 ranks" "$restarted"
[ "$(ending "$clean")" = "$(ending "$restarted")" ] && [ -n "$(grep -o 'crc32' <<<"$clean")" ] ||
  { echo "FAIL: the restarted run ended with \"$(ending "$restarted")\", the clean one with" \
      "\"$(ending "$clean")\""; exit 1; }
echo "PASS: $(ending "$clean") with and without the crash at batch $kill_at, resumed at $resumed_at"
