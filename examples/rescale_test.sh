#!/usr/bin/env bash
# A job that loses ranks and goes on with fewer. The demo on 4 gloo processes
# under engine-launch, 60 iterations with a checkpoint every 10, its last rank
# killed (SIGKILL) as it draws a batch picked by SEED after the first
# checkpoint; then the same work folder resumed (--resume auto) on 2
# processes. The resumed run must start from the newest checkpoint at the
# place in the data that 4 ranks reached (epoch and samples consumed, which
# 2 ranks then go on from), end with parameters identical on both ranks and
# still learn. STRATEGY, if given, replaces the config's strategy (JSON).
#   rescale_test.sh TRAIN CONFIG ENGINE_LAUNCH SEED [STRATEGY]
set -euo pipefail
# Under Bazel the script may run from another package's folder.
examples=$(dirname "$0")
[[ -z ${TEST_SRCDIR:-} ]] || examples=$TEST_SRCDIR/$TEST_WORKSPACE/examples
source "$examples/test_lib.sh"
train=$1 config=$2 launch=$3 seed=$4 strategy=${5:-}
work="${TEST_TMPDIR:-$(mktemp -d)}/rescale"
rm -rf "$work" && mkdir -p "$work"
config=$(with_strategy "$config" "$strategy" "$work")
batch=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["train"]["batch_size"])' "$config")
size=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["train_data"]["size"])' "$config")
RANDOM=$seed
kill_at=$((11 + RANDOM % 49))  # a batch of iterations 11-59
run() {  # PROCESSES [FLAGS...]
  local processes=$1
  shift
  timeout 300 "$launch" --nproc-per-node "$processes" "$train" --config "$config" \
    --launcher pytorch --backend gloo --iters 60 --checkpoint-interval 10 --resume auto \
    --work-dir "$work/run" "$@" 2>&1 | tr '\r' '\n'
}
killed=$(run 4 --fail-after-batches "$kill_at" || true)
# The launcher names the first rank it finds ended: the killed one, or a
# peer that already failed on the broken connection.
expect "\[rank 3\] train: --fail-after-batches: this rank kills itself now" "$killed"
expect "; stopping the others" "$killed"
saved=$(((kill_at - 1) / 10 * 10))
consumed=$((saved * 4 * batch))
resumed=$(run 2)
echo "$resumed"
expect "resumed from $work/run/iter_$saved.pth at iteration $saved, epoch $((consumed / size)) after $((consumed % size)) samples" "$resumed"
expect "parameters and buffers identical on all 2 ranks" "$resumed"
# FSDPStrategy writes sharded checkpoints (a folder), which 2 ranks reshard.
if [[ $strategy == *FSDPStrategy* ]]; then
  [[ -d $work/run/iter_$saved.pth ]] || { echo "FAIL: iter_$saved.pth is not sharded"; exit 1; }
fi
accuracy=$(grep -o 'final val accuracy [0-9.]*' <<<"$resumed" | grep -o '[0-9.]*$')
python3 -c "import sys; sys.exit(0 if float('$accuracy') >= 0.8 else 1)" ||
  { echo "FAIL: accuracy $accuracy after resuming on 2 ranks"; exit 1; }
echo "PASS: killed at batch $kill_at on 4 ranks, resumed from iteration $saved on 2, accuracy $accuracy"
