#!/usr/bin/env bash
# The demo end to end: train (writing a Chrome trace of every rank's
# collectives), then resume from the latest checkpoint, then start a run from
# its weights alone (--load-from) and validate them unchanged.
#   demo_test.sh RANKS CONFIG MIN_ACCURACY COMMAND...
# COMMAND is the train binary, or a launcher followed by it and its flags;
# MIN_ACCURACY is the least validation accuracy after 60 iterations.
set -euo pipefail
# Under Bazel the script may run from another package's folder.
examples=$(dirname "$0")
[[ -z ${TEST_SRCDIR:-} ]] || examples=$TEST_SRCDIR/$TEST_WORKSPACE/examples
source "$examples/test_lib.sh"
ranks=$1 config=$2 min_accuracy=$3
shift 3
work="${TEST_TMPDIR:-$(mktemp -d)}/work"
rm -rf "$work"

run() {
  "$@" --config "$config" --work-dir "$work" --checkpoint-interval 30 2>&1 | tr '\r' '\n'
}

trace="${TEST_TMPDIR:-$(mktemp -d)}/trace.json"
logging="${TEST_TMPDIR:-$(mktemp -d)}/ddp_logging.json"
first=$(run "$@" --iters 60 --trace "$trace" --ddp-logging "$logging") ||
  { echo "$first"; echo "FAIL: the first run failed"; exit 1; }
echo "$first"
expect "ddp: $ranks ranks on" "$first"
expect "wrote DDP's logging data to $logging" "$first"
expect "\"world_size\": $ranks" "$(cat "$logging")"
expect '"has_rebuilt_buckets": true' "$(cat "$logging")"
expect "parameters and buffers identical on all $ranks ranks" "$first"
expect "saved checkpoint $work/iter_60.pth" "$first"
expect "wrote the collectives of $ranks ranks to $trace" "$first"
for ((r = 0; r < ranks; r++)); do
  expect "\"name\":\"rank $r\"" "$(cat "$trace")"
done
expect '"name":"all_reduce #' "$(cat "$trace")"
accuracy=$(sed -n 's/.*final val accuracy \([0-9.]*\).*/\1/p' <<<"$first")
awk -v a="$accuracy" -v m="$min_accuracy" 'BEGIN { exit !(a >= m) }' ||
  { echo "FAIL: final val accuracy $accuracy < $min_accuracy: the model did not learn"; exit 1; }

second=$(run "$@" --iters 90 --resume auto) ||
  { echo "$second"; echo "FAIL: the resumed run failed"; exit 1; }
echo "$second"
expect "resumed from $work/iter_60.pth at iteration 60" "$second"
expect "trained from iteration 60" "$second"
expect "parameters and buffers identical on all $ranks ranks" "$second"

third=$(run "$@" --iters 0 --load-from "$work/iter_60.pth" --work-dir "$work/loaded") ||
  { echo "$third"; echo "FAIL: the run from loaded weights failed"; exit 1; }
echo "$third"
expect "loaded the weights of $work/iter_60.pth" "$third"
expect "final val accuracy $accuracy" "$third"
echo PASS
