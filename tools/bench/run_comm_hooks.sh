#!/usr/bin/env bash
# DDP communication hooks beside PyTorch 2.x's own, in one run: for each
# rank count and hook (none, allreduce, fp16, bf16, PowerSGD rank 1), the
# 25M-parameter MLP's step through ddp_step on gloo (engine-launch) and mpi
# (mpirun), then torch_ddp_peer.py with the pinned wheel's PyTorch (.venv,
# under its own torchrun) on gloo. Our lines give the bytes each rank hands
# to all_reduce per step.
#   bash tools/bench/run_comm_hooks.sh [ranks...]      (default: 2 4)
# HOOKS (default "none allreduce fp16 bf16 powersgd"), MODEL (default
# large), STEPS (default 30) timed steps after WARMUP (default 5),
# PEER_TIMEOUT (default 300 s: PyTorch's PowerSGD hook can hang on gloo;
# the script then says so and goes on).
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks_list=("$@")
[ ${#ranks_list[@]} -gt 0 ] || ranks_list=(2 4)
read -r -a hooks <<<"${HOOKS:-none allreduce fp16 bf16 powersgd}"
steps=(--model "${MODEL:-large}" --steps "${STEPS:-30}" --warmup "${WARMUP:-5}")
bazel build //tools/bench:ddp_step //tools/launch:engine-launch
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1  # more ranks than cores
launch() { bazel-bin/tools/launch/engine-launch --nproc-per-node "$1" "${@:2}" | sed 's/^\[rank 0\] //'; }
echo "# $(date -u +%F) nproc=$(nproc --all) cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
for ranks in "${ranks_list[@]}"; do
  for hook in "${hooks[@]}"; do
    launch "$ranks" bazel-bin/tools/bench/ddp_step --backend gloo "${steps[@]}" --comm-hook "$hook"
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" \
      bazel-bin/tools/bench/ddp_step --backend mpi "${steps[@]}" --comm-hook "$hook"
    timeout "${PEER_TIMEOUT:-300}" .venv/bin/torchrun --nproc-per-node "$ranks" \
      tools/bench/torch_ddp_peer.py "${steps[@]}" --comm-hook "$hook" 2>/dev/null ||
      echo "python gloo  ranks $ranks hook $hook: no result (failed or past ${PEER_TIMEOUT:-300} s)"
  done
done
