#!/usr/bin/env bash
# A checkpoint between the engine and PyTorch, both ways: the demo (2
# simulated ranks) trains and saves; PyTorch loads that file with
# torch.load(weights_only=True) and torch.save's its weights; the demo starts
# a run from the torch.save file (--load-from) and must validate exactly as
# the run that wrote the checkpoint.
#   torch_round_trip.sh PYTHON TRAIN_BINARY WORK_DIR
set -euo pipefail
python=$1 train=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
demo() { "$train" --config examples/train_config.json --ranks 2 "$@" 2>&1 | tr '\r' '\n'; }

trained=$(demo --iters 60 --checkpoint-interval 60 --work-dir "$work/trained")
accuracy=$(grep -o 'final val accuracy [0-9.]*' <<<"$trained") ||
  { echo "$trained"; echo "FAIL: the demo reported no accuracy"; exit 1; }
"$python" -W ignore tools/checkpoint/torch_loads.py "$work/trained" "$work/torch_saved.pth"
loaded=$(demo --iters 0 --load-from "$work/torch_saved.pth" --work-dir "$work/loaded")
grep -q "loaded the weights of $work/torch_saved.pth" <<<"$loaded" &&
  grep -q "$accuracy" <<<"$loaded" ||
  { echo "$loaded"; echo "FAIL: the run from PyTorch's file did not validate as the run that wrote it ($accuracy)"; exit 1; }
echo "PASS: $accuracy both ways"
