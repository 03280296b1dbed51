#!/usr/bin/env bash
# The sharded-training step benchmark: for each model (large ~25M, xl ~100M
# parameters, Adam) and rank count, every strategy (DDP, the peer, first)
# on gloo (engine-launch) and on mpi (mpirun), one after the other in one
# run. There is no Python FSDP peer here (bench/HISTORY.md says why).
#   bash tools/bench/run_sharded_step.sh [ranks...]      (default: 1 2 4)
# MODELS="large xl" and STRATEGIES="ddp zero1 ..." narrow the grid; STEPS
# (default 10) timed steps after 2 warmup steps.
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks_list=("$@")
[ ${#ranks_list[@]} -gt 0 ] || ranks_list=(1 2 4)
read -r -a models <<< "${MODELS:-large xl}"
read -r -a strategies <<< "${STRATEGIES:-ddp zero1 zero2 full_shard shard_grad_op}"
bazel build //tools/bench:sharded_step //tools/launch:engine-launch
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1  # more ranks than cores
launch() { bazel-bin/tools/launch/engine-launch --nproc-per-node "$1" "${@:2}" | sed 's/^\[rank 0\] //'; }
echo "# $(date -u +%F) nproc=$(nproc --all) cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
for model in "${models[@]}"; do
  for ranks in "${ranks_list[@]}"; do
    for strategy in "${strategies[@]}"; do
      flags=(--model "$model" --strategy "$strategy" --steps "${STEPS:-10}" --warmup 2)
      launch "$ranks" bazel-bin/tools/bench/sharded_step --backend gloo "${flags[@]}"
      mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" \
        bazel-bin/tools/bench/sharded_step --backend mpi "${flags[@]}"
    done
  done
done
