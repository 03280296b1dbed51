#!/usr/bin/env bash
# The GPU runner: one command that builds the engine and its GPU suites with
# CMake against the machine's PyTorch (no Bazel, no network), then runs the
# nccl backend's test, the engine's unit tests, the gloo backend's suites
# and the demo in 2 processes on the CPU, and on nccl with CUDA tensors: the
# collectives' property suites, the table of bad arguments, the helpers
# (*_anywhere) and the sharded-training equivalence (cpu_offload drawn) in 2
# processes on one GPU, the sharded one in 1 too; the DDP equivalence, AMP
# (float16), Join and activation checkpointing in 2 processes; the demo on 2
# ranks; then the benchmarks beside PyTorch's own (bench_* steps). Two ranks share the one
# GPU as if on two hosts (ci/gpu_rank.sh).
#
#   bash ci/gpu.sh              on a GPU machine (python3 has a CUDA torch)
#   bash ci/gpu.sh --rehearse   anywhere else: the same build, the nccl
#                               backend's own test, the unit tests, gloo,
#                               the suites and the demo on the simulator, a
#                               checkpoint to and from this PyTorch, the
#                               cross-implementation test against it; stops
#                               where a GPU is needed (CI runs it offline,
#                               without Bazel)
#
# ONLY=REGEX runs only the steps whose names match (as grep -E);
# STEP_TIMEOUT (seconds, default 300) bounds each step; BENCH_ROUNDS pairs
# the benchmarks (below); BUILD_TYPE is CMake's (default Release; CI's
# rehearsal builds "None", unoptimised, since it proves the build and not
# its speed).
#
# Needs python3 with torch (or TORCH_PYTHON), cmake and ninja; GoogleTest,
# RapidCheck, nlohmann-json and zlib as packages, or carried in .gpu-deps
# (ci/gpu_deps.sh). Logs go to build/gpu/logs, and where $OUT is set (the
# device tool brings back what is under it, a few files at most) as one
# archive, $OUT/gpu-logs.tar.gz. Exits non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
python=${TORCH_PYTHON:-python3}
build=build/gpu
logs=$build/logs
rm -rf "$logs" && mkdir -p "$logs"
if [[ -n ${OUT:-} ]]; then
  trap 'tar czf "$OUT/gpu-logs.tar.gz" -C "$build" logs' EXIT
fi
started=$SECONDS

torch_cmake=$("$python" -W ignore -c 'import torch; print(torch.utils.cmake_prefix_path)')
"$python" -W ignore -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' |
  tee "$logs/machine.txt"
# A unity build (CMake's): most of each source's compile time is LibTorch's
# headers, parsed once per batch. Batches of 32 sources where cores are few
# (CI's 2), of 8 where many cores compile them side by side (a GPU machine).
batch=$(($(nproc) <= 4 ? 32 : 8))
cmake -S . -B "$build" -G Ninja -DDIST_ENGINE_GPU_SUITES=ON -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE="$batch" \
  -DCMAKE_PREFIX_PATH="$torch_cmake;$PWD/.gpu-deps/usr" >"$logs/configure.log" 2>&1 ||
  { tail -40 "$logs/configure.log"; exit 1; }
cmake --build "$build" >"$logs/build.log" 2>&1 || { grep -A3 "error:\|FAILED:" "$logs/build.log" | tail -40; exit 1; }
echo "built in $((SECONDS - started)) s"

passed=0
failed=0
# run NAME COMMAND...: its output in $logs/NAME.log, a line here.
run() {
  local name=$1
  shift
  grep -qE "${ONLY:-.}" <<<"$name" || return 0
  local start=$SECONDS
  # A temporary folder of its own, as Bazel gives each test.
  export TEST_TMPDIR="$PWD/$build/tmp/$name"
  rm -rf "$TEST_TMPDIR" && mkdir -p "$TEST_TMPDIR"
  if timeout "${STEP_TIMEOUT:-300}" "$@" >"$logs/$name.log" 2>&1; then
    passed=$((passed + 1))
    echo "PASS $name ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1))
    echo "FAIL $name ($((SECONDS - start)) s)"
    tail -25 "$logs/$name.log"
  fi
}
# on_gpu NAME RANKS SUITE ARGS...: the suite in RANKS processes on nccl. A
# collective that timed out leaves its communicator unusable, so a failing
# case is reported as drawn (noshrink): shrinking could only time out again.
on_gpu() {
  local name=$1 ranks=$2
  shift 2
  run "$name" env HARNESS_BACKEND=nccl RC_PARAMS="seed=1 noshrink=1" HARNESS_TIMEOUT_MS=20000 \
    "$build/engine-launch" --nproc-per-node "$ranks" ci/gpu_rank.sh "$@"
}

run nccl_backend_test "$build/nccl_backend_test"
run unit_tests "$build/unit_tests"
# The gloo backend (the engine's own Gloo, third_party/gloo) against this
# LibTorch: the collectives' suites and the demo in 2 processes, on CPU
# tensors, over loopback.
on_gloo() {
  local name=$1
  shift
  run "$name" env HARNESS_BACKEND=gloo RC_PARAMS="seed=1" "$build/engine-launch" --nproc-per-node 2 "$@"
}
on_gloo movement_gloo_2 env SUITE_SOURCE=movement_property_test.cc "$build/gpu_suites"
on_gloo reduction_gloo_2 env SUITE_SOURCE=reduction_property_test.cc "$build/gpu_suites"
on_gloo demo_gloo_2 "$build/train" --config examples/train_config.json --launcher pytorch \
  --backend gloo --iters 60 --work-dir "$build/demo_gloo"
if [[ $mode == --rehearse ]]; then
  # The same suites and demo on the simulator (CPU tensors), against this
  # LibTorch.
  for suite in movement_property_test reduction_property_test arguments_test helpers_test \
    sharded_equivalence_property_test; do
    run "${suite}_sim" env RC_PARAMS="seed=1" SUITE_SOURCE="$suite.cc" "$build/gpu_suites"
  done
  run demo_sim_2 "$build/train" --config examples/train_config.json --ranks 2 --iters 60 \
    --work-dir "$build/demo"
  run torch_round_trip tools/checkpoint/torch_round_trip.sh "$python" "$build/train" \
    "$build/round_trip"
  # The cross-implementation test: PyTorch's DDP, FSDP and
  # ZeroRedundancyOptimizer and the engine's strategies train alike, in 2
  # gloo processes each.
  run cross_check testing/cross_check/cross_check.sh "$python" "$build/cross_check" \
    "$build/engine-launch" "$build/cross_check_work"
  echo "gpu rehearsal: ${passed} passed, ${failed} failed; stopped where a GPU is needed"
  exit $((failed > 0))
fi

nvidia-smi -L | tee -a "$logs/machine.txt"
on_gpu reduction_nccl_2 2 env SUITE_SOURCE=reduction_property_test.cc "$build/gpu_suites"
on_gpu ddp_equivalence_nccl_2 2 "$build/ddp_equivalence" nccl
on_gpu demo_nccl_2 2 "$build/train" --config examples/train_config.json --launcher pytorch \
  --backend nccl --iters 60 --work-dir "$build/demo"
on_gpu movement_nccl_2 2 env SUITE_SOURCE=movement_property_test.cc "$build/gpu_suites"
on_gpu sharded_equivalence_nccl_2 2 env SUITE_SOURCE=sharded_equivalence_property_test.cc "$build/gpu_suites"
on_gpu helpers_nccl_2 2 env SUITE_SOURCE=helpers_test.cc "$build/gpu_suites" --gtest_filter='Anywhere*'
on_gpu arguments_nccl_2 2 env SUITE_SOURCE=arguments_test.cc "$build/gpu_suites"
on_gpu sharded_equivalence_nccl_1 1 env SUITE_SOURCE=sharded_equivalence_property_test.cc "$build/gpu_suites"
on_gpu amp_nccl_2 2 env SUITE_SOURCE=amp_test.cc "$build/gpu_suites"
on_gpu join_nccl_2 2 env SUITE_SOURCE=join_test.cc "$build/gpu_suites"
on_gpu activation_checkpointing_nccl_2 2 env SUITE_SOURCE=activation_checkpointing_test.cc "$build/gpu_suites"

# The benchmarks on nccl, each beside PyTorch's own on the same GPU and ranks
# (figures in bench/RESULTS.md): all_reduce busbw, the DDP step (large MLP,
# 25M parameters) and the FULL_SHARD step. BENCH_ROUNDS (default 1) repeats
# the pairs, ours then PyTorch's, round after round, for paired medians.
sizes=(--min-bytes 1M --max-bytes 256M)
for ((round = 1; round <= ${BENCH_ROUNDS:-1}; round++)); do
  r=$([[ ${BENCH_ROUNDS:-1} == 1 ]] || echo "_r$round")
  on_gpu "bench_all_reduce_nccl_2$r" 2 "$build/collectives" --backend nccl --ops all_reduce "${sizes[@]}"
  on_gpu "bench_all_reduce_torch_nccl_2$r" 2 "$python" tools/bench/torch_gloo_peer.py --backend nccl \
    --ops all_reduce "${sizes[@]}"
  on_gpu "bench_ddp_step_nccl_2$r" 2 "$build/ddp_step" --backend nccl --model large
  on_gpu "bench_ddp_step_torch_nccl_2$r" 2 "$python" tools/bench/torch_ddp_peer.py --backend nccl \
    --model large
  on_gpu "bench_full_shard_nccl_2$r" 2 "$build/sharded_step" --backend nccl --model large \
    --strategy full_shard
  on_gpu "bench_full_shard_torch_nccl_2$r" 2 "$python" tools/bench/torch_sharded_peer.py \
    --backend nccl --model large
done
echo "gpu: ${passed} passed, ${failed} failed in $((SECONDS - started)) s"
exit $((failed > 0))
