#!/usr/bin/env bash
# Builds the libFuzzer targets (clang 14, with AddressSanitizer and
# UndefinedBehaviorSanitizer) and runs each on its seed corpus for
# FUZZ_SECONDS (default 10). Exits non-zero, printing the input, when a
# target crashes, leaks, trips a sanitizer or throws what it must not.
#   bash tools/fuzz/fuzz.sh [TARGET ...]        # CI: every target, 10 s each
#   FUZZ_SECONDS=3600 bash tools/fuzz/fuzz.sh unpickle_fuzz   # a longer run
# Targets: unpickle_fuzz (object frames, part files, checkpoints),
# launch_env_fuzz (the launch environment and Slurm lists), fault_plan_fuzz,
# flight_record_fuzz (the files the diagnosis tool reads), config_fuzz (a
# config file through parse_config, ConfigReader and the FUNCTIONS registry),
# sharded_checkpoint_fuzz (a sharded checkpoint's files through load_sharded),
# store_fuzz (the requests of LibTorch 1.x's store clients to engine-launch's
# store).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${FUZZ_SECONDS:-10}
out=${FUZZ_OUT:-$(mktemp -d)}
mkdir -p "$out"
flags=(-O1 -g -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
torch=(-isystem /usr/include/torch/csrc/api/include -ltorch -ltorch_cpu -lc10)

declare -A sources=(
  [unpickle_fuzz]="engine/dist/pickle.cc engine/dist/pickle_bounds.cc engine/dist/zip_index.cc"
  [launch_env_fuzz]="engine/launch/launch.cc engine/launch/hostlist.cc"
  [fault_plan_fuzz]="sim/fault_plan.cc"
  [flight_record_fuzz]="engine/flight/record.cc engine/flight/diagnosis.cc engine/dist/describe.cc"
  [config_fuzz]="tools/fuzz/outside_a_job.cc engine/registry/config.cc
    engine/model/init/init_functions.cc"
  [sharded_checkpoint_fuzz]="tools/fuzz/outside_a_job.cc tools/fuzz/sharded_input.cc
    engine/checkpoint/sharded/sharded_load.cc
    engine/checkpoint/sharded/reshard.cc engine/checkpoint/sharded/directory.cc
    engine/checkpoint/file.cc engine/checkpoint/deferred_saves.cc engine/dist/pickle.cc
    engine/dist/pickle_bounds.cc engine/dist/zip_index.cc engine/model/sharding/shard_layout.cc
    engine/io/atomic_file.cc
    engine/io/file_system.cc"
  [store_fuzz]="tools/launch/store_service.cc"
)
declare -A seeds=(
  [unpickle_fuzz]="tools/fuzz/corpus/unpickle engine/checkpoint/testdata"
  [launch_env_fuzz]="tools/fuzz/corpus/launch_env"
  [fault_plan_fuzz]="tools/fuzz/corpus/fault_plan"
  [flight_record_fuzz]="tools/fuzz/corpus/flight_record"
  [config_fuzz]="tools/fuzz/corpus/config $out/example_configs"
  [sharded_checkpoint_fuzz]="tools/fuzz/corpus/sharded_checkpoint"
  [store_fuzz]="tools/fuzz/corpus/store"
)
mkdir -p "$out/example_configs"
cp examples/*.json "$out/example_configs/"

targets=("$@")
[ ${#targets[@]} -gt 0 ] ||
  targets=(unpickle_fuzz launch_env_fuzz fault_plan_fuzz flight_record_fuzz config_fuzz
    sharded_checkpoint_fuzz store_fuzz)

build() {
  local target=$1 standard=-std=c++20 libs=()
  case $target in
    unpickle_fuzz | flight_record_fuzz) libs=("${torch[@]}") ;;
    # LibTorch 1.13's module and Dict headers do not compile under clang 14
    # at C++20 (a vector of the then incomplete IValue).
    config_fuzz) libs=("${torch[@]}") standard=-std=c++17 ;;
    sharded_checkpoint_fuzz) libs=("${torch[@]}" -lz) standard=-std=c++17 ;;
  esac
  # shellcheck disable=SC2086
  clang++-14 "$standard" "${flags[@]}" "tools/fuzz/$target.cc" ${sources[$target]} \
    engine/dist/errors.cc "${libs[@]}" -o "$out/$target" 2>"$out/$target.build.log" ||
    { cat "$out/$target.build.log" >&2; return 1; }
}

# Built side by side (each compile is one thread), then run one at a time.
pids=()
for target in "${targets[@]}"; do
  [ -n "${sources[$target]:-}" ] || { echo "fuzz: no target $target" >&2; exit 2; }
  build "$target" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

# fuzz TARGET: runs it for the time given; its status is the fuzzer's.
fuzz() {
  local target=$1
  mkdir -p "$out/$target.corpus" "$out/$target.crashes"
  # shellcheck disable=SC2086
  "$out/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="$out/$target.crashes/" "$out/$target.corpus" ${seeds[$target]} \
    >"$out/$target.log" 2>&1
}

# Run as many at a time as there are cores (each fuzzer is one thread, so
# each still gets a core for its whole time), then reported in order.
declare -A fuzzer
for target in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
  fuzz "$target" &
  fuzzer[$target]=$!
done
for target in "${targets[@]}"; do
  if ! wait "${fuzzer[$target]}"; then
    tail -40 "$out/$target.log"
    for input in "$out/$target.crashes"/*; do echo "fuzz: $target failed on $input:"; od -A x -t x1z "$input" | head -20; done
    exit 1
  fi
  echo "fuzz: $target: $(grep -oE 'Done [0-9]+ runs' "$out/$target.log" | grep -oE '[0-9]+') executions in ${seconds} s, nothing found"
done
