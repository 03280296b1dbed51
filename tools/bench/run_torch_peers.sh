#!/usr/bin/env bash
# The sharded-training step beside PyTorch 2.x's own, on gloo, 2 ranks: for
# each model (large ~25M, xl ~100M parameters, Adam) and pair, ROUNDS
# alternations of ours (sharded_step, built against the same wheel's
# LibTorch) then PyTorch's (torch_sharded_peer.py, fused Adam). Each line
# has the step time and the largest peak RSS of the ranks.
#   bash tools/bench/run_torch_peers.sh
# ROUNDS (default 2), MODELS (default "large xl"), PAIRS (default: DDP,
# FSDP1 FULL_SHARD, FSDP2 against FULL_SHARD, FSDP1 SHARD_GRAD_OP, ZeRO-1
# against ZeroRedundancyOptimizer; each OURS:THEIRS), STEPS (default 10)
# timed steps after 2 warmup steps, ADAM (default fused) the peer's Adam.
set -euo pipefail
cd "$(dirname "$0")/../.."
read -r -a models <<<"${MODELS:-large xl}"
read -r -a pairs <<<"${PAIRS:-ddp:ddp full_shard:full_shard full_shard:fsdp2 shard_grad_op:shard_grad_op zero1:zero1}"
bazel build --config=torch2 //tools/bench:sharded_step //tools/launch:engine-launch
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
launch() { bazel-bin/tools/launch/engine-launch --nproc-per-node 2 "$@" | sed 's/^\[rank 0\] //'; }
echo "# $(date -u +%F) nproc=$(nproc --all) cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
for model in "${models[@]}"; do
  for pair in "${pairs[@]}"; do
    for ((round = 0; round < ${ROUNDS:-2}; ++round)); do
      steps=(--model "$model" --steps "${STEPS:-10}" --warmup 2)
      launch bazel-bin/tools/bench/sharded_step --backend gloo --strategy "${pair%%:*}" "${steps[@]}"
      launch .venv/bin/python -W ignore tools/bench/torch_sharded_peer.py --strategy "${pair##*:}" \
        --adam "${ADAM:-fused}" "${steps[@]}"
    done
  done
done
