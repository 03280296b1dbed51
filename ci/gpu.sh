#!/usr/bin/env bash
# The GPU job (ci/gpu-job.yml runs it on a GPU runner): builds the engine with
# --config=cuda against a CUDA LibTorch and runs, with nccl, every test tagged
# "gpu": the collectives' property suites with one rank per GPU of the node
# (engine-launch), plus the nccl backend's own test.
#   LIBTORCH_HOME=/opt/libtorch bash ci/gpu.sh
# Needs: the NVIDIA driver and at least 2 GPUs, the CUDA toolkit with NCCL in
# /usr/local/cuda, and LIBTORCH_HOME pointing at a CUDA build of LibTorch (the
# folder holding include/ and lib/; Debian's libtorch is CPU-only).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
if [[ -z ${LIBTORCH_HOME:-} ]]; then
  echo "ci/gpu.sh: set LIBTORCH_HOME to a CUDA build of LibTorch" >&2
  exit 2
fi
nvidia-smi -L
mapfile -t gpu_tests < <(bazel query 'attr(tags, "\bgpu\b", //...)')
bazel test --config=cuda --repo_env=LIBTORCH_HOME="$LIBTORCH_HOME" --test_output=errors \
  "${gpu_tests[@]}" //engine/dist/backends/nccl/...
