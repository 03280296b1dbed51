#!/usr/bin/env bash
# Runs a test binary under a launcher with one rank per GPU of this node:
#   run_on_gpus.sh LAUNCHER BINARY [ARGS...]
# For GPU runners (ci/gpu.sh); without at least two GPUs it fails saying so.
set -euo pipefail
launcher=$1
shift
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if ((gpus < 2)); then
  echo "run_on_gpus.sh: needs at least 2 GPUs (nvidia-smi -L lists ${gpus:-0}); run it on a GPU runner (ci/gpu.sh)" >&2
  exit 1
fi
exec "$launcher" --nproc-per-node "$gpus" "$@"
