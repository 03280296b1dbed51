#!/usr/bin/env bash
# The DDP step benchmark and its peer, side by side in one run: for each
# model (small ~3M, large ~25M parameters) and rank count, ours on gloo
# (engine-launch) and on mpi (mpirun), then PyTorch's Python DDP on gloo
# (engine-launch: Debian's torchrun 1.13 fails on Python 3.11).
#   bash tools/bench/run_ddp_step.sh [ranks...]      (default: 1 2 4)
# VIEW=1 runs every side with gradient_as_bucket_view (default: off, as in
# PyTorch and mmengine); CAP=N with bucket_cap_mb N (default 25, theirs).
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks_list=("$@")
ddp_options=(--gradient-as-bucket-view "${VIEW:-0}" --bucket-cap-mb "${CAP:-25}")
[ ${#ranks_list[@]} -gt 0 ] || ranks_list=(1 2 4)
bazel build //tools/bench:ddp_step //tools/launch:engine-launch
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1  # more ranks than cores
launch() { bazel-bin/tools/launch/engine-launch --nproc-per-node "$1" "${@:2}" | sed 's/^\[rank 0\] //'; }
echo "# $(date -u +%F) nproc=$(nproc --all) cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
for model in small large; do
  for ranks in "${ranks_list[@]}"; do
    launch "$ranks" bazel-bin/tools/bench/ddp_step --backend gloo --model "$model" "${ddp_options[@]}"
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" \
      bazel-bin/tools/bench/ddp_step --backend mpi --model "$model" "${ddp_options[@]}"
    launch "$ranks" /usr/bin/python3 tools/bench/torch_ddp_peer.py --model "$model" "${ddp_options[@]}"
  done
done
