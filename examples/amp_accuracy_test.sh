#!/usr/bin/env bash
# bfloat16 autocast trains the Fashion-MNIST demo as well as float32 does:
# both configs for the same iterations on RANKS simulated ranks (deterministic
# runs), and AmpOptimWrapper's final accuracy at most MARGIN below float32's.
#   amp_accuracy_test.sh TRAIN FLOAT32_CONFIG AMP_CONFIG RANKS ITERS MARGIN
set -euo pipefail
train=$1 float32=$2 amp=$3 ranks=$4 iters=$5 margin=$6
work="${TEST_TMPDIR:-$(mktemp -d)}"

accuracy() {
  local out
  out=$("$train" --config "$1" --work-dir "$work/$2" --ranks "$ranks" --iters "$iters" 2>&1 | tr '\r' '\n') ||
    { echo "$out"; echo "FAIL: $1 did not train"; exit 1; }
  sed -n 's/.*final val accuracy \([0-9.]*\).*/\1/p' <<<"$out"
}

full=$(accuracy "$float32" float32)
mixed=$(accuracy "$amp" amp)
echo "after $iters iterations on $ranks ranks: float32 $full, bfloat16 autocast $mixed (margin $margin)"
awk -v f="$full" -v m="$mixed" -v d="$margin" 'BEGIN { exit !(f > 0 && m >= f - d) }' ||
  { echo "FAIL: AmpOptimWrapper's accuracy $mixed is more than $margin below float32's $full"; exit 1; }
echo PASS
