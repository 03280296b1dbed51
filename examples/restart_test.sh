#!/usr/bin/env bash
# A crash and a restart that loses nothing. The demo on 2 gloo processes
# under LAUNCHER (engine-launch and its flags for the ranks of one machine, or
# testing/hosts/run_on_hosts.sh for ranks on several), 60 iterations with a
# checkpoint every 20: once without a fault; once with --max-restarts 1 and
# the last rank killed (SIGKILL) as it draws its 45th batch, so that both
# ranks restart and resume from iter_40.pth (--resume auto). Both runs must
# end with the same parameters (their CRC-32) and the same validation
# accuracy.
#   restart_test.sh TRAIN CONFIG LAUNCHER...
set -euo pipefail
train=$1 config=$2
shift 2
launcher=("$@")
work="${TEST_TMPDIR:-$(mktemp -d)}"
rm -rf "$work/clean" "$work/restarted"
run() {  # WORK_DIR [FLAGS...]: the flags go to the launcher (--max-restarts) or the demo
  local dir=$1 launcher_flags=() train_flags=()
  shift
  [ $# = 0 ] || launcher_flags=("$1" "$2") train_flags=("$3" "$4")
  timeout 300 "${launcher[@]}" "${launcher_flags[@]}" "$train" --config "$config" \
    --launcher pytorch --backend gloo --iters 60 --checkpoint-interval 20 --resume auto \
    --work-dir "$dir" "${train_flags[@]}" 2>&1 | tr '\r' '\n'
}
expect() {
  grep -q -- "$1" <<<"$2" || { echo "$2"; echo "FAIL: expected \"$1\""; exit 1; }
}
ending() {  # the parameters' CRC-32 and the accuracy, as one line
  echo "$(grep -o 'crc32 [0-9a-f]*' <<<"$1") $(grep -o 'final val accuracy [0-9.]*' <<<"$1")"
}

clean=$(run "$work/clean")
expect "parameters and buffers identical on all 2 ranks" "$clean"
restarted=$(run "$work/restarted" --max-restarts 1 --fail-after-batches 45)
echo "$restarted"
expect "rank 1 was killed by signal 9" "$restarted"
expect "restarting every rank (restart 1 of 1)" "$restarted"
expect "resumed from $work/restarted/iter_40.pth at iteration 40" "$restarted"
expect "parameters and buffers identical on all 2 ranks" "$restarted"
[ "$(ending "$clean")" = "$(ending "$restarted")" ] && [ -n "$(grep -o 'crc32' <<<"$clean")" ] ||
  { echo "FAIL: the restarted run ended with \"$(ending "$restarted")\", the clean one with" \
      "\"$(ending "$clean")\""; exit 1; }
echo "PASS: $(ending "$clean") with and without the crash"
