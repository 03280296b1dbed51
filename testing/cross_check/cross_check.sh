#!/usr/bin/env bash
# The cross-implementation test against PyTorch 2.x: PyTorch (DDP, FSDP
# FULL_SHARD, ZeroRedundancyOptimizer) and the engine (DDPStrategy,
# FSDPStrategy FULL_SHARD, ZeroStrategy stages 1-3) train the same MLP from
# the same initial weights on the same batches, in 2 gloo processes each, with
# SGD (momentum) and Adam, clipping by norm; the final parameters, optimizer
# state, losses and gradient norms must agree within torch_reference.py's
# tolerance. The weights and batches are written by the test, as plain
# tensor folders (tensors.json and raw files).
#   cross_check.sh PYTHON CROSS_CHECK_BINARY ENGINE_LAUNCH WORK_DIR
set -euo pipefail
python=$1 binary=$2 launch=$3 work=$4
reference="$(dirname "$0")/torch_reference.py"
rm -rf "$work" && mkdir -p "$work"
"$python" -W ignore "$reference" inputs "$work/inputs"
"$launch" --nproc-per-node 2 "$python" -W ignore "$reference" train "$work/inputs" "$work/torch"
"$launch" --nproc-per-node 2 "$binary" "$work/inputs" "$work/engine"
"$python" -W ignore "$reference" compare "$work/torch" "$work/engine"
