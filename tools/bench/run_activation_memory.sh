#!/usr/bin/env bash
# Activation checkpointing on the 100M model (3 residual MLP blocks, width
# 2048), ours and PyTorch 2.x's torch.utils.checkpoint on the same blocks
# (torch_checkpoint_peer.py, with the wheel in .venv): each mode in a process
# of its own (peak RSS is a process's high-water mark), alternated for ROUNDS
# rounds (default 2).
#   bash tools/bench/run_activation_memory.sh [flags both sides take]
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //tools/bench:activation_memory
echo "# $(date -u +%F) nproc=$(nproc --all) cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
for _ in $(seq "${ROUNDS:-2}"); do
  for checkpoint in 0 1; do
    bazel-bin/tools/bench/activation_memory --checkpoint "$checkpoint" "$@"
    .venv/bin/python tools/bench/torch_checkpoint_peer.py --checkpoint "$checkpoint" "$@"
  done
done
