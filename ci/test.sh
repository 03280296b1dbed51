#!/usr/bin/env bash
# The whole test suite, as README.md's second command and CI run it: installs
# what is missing, runs every test against Debian's LibTorch 1.13 (the
# simulator suites in-process, the process suites over mpi and gloo in 2 and
# 4 processes, engine-launch's tests), the consumer example workspace's
# tests, the simulator suites again under ThreadSanitizer and (with the
# engine's unit tests) under AddressSanitizer and UndefinedBehaviorSanitizer,
# and builds the nccl backend with --config=cuda; then, against the official LibTorch 2.x
# (the pinned wheel in .venv), the GPU runner's rehearsal (a CMake build of
# the engine and the GPU suites, offline and without Bazel, running them on
# the simulator) and the CMake consumer. The fuzz targets run for 10 s each
# (tools/fuzz/fuzz.sh). First, that the README and docs/
# name only files that exist, and that the CMake build lists the same files
# as Bazel. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/check_docs.sh
python3 tools/cmake/sources.py --check

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# --config=ci: each library's sources as one translation unit
# (--config=unity, bazel/cc.bzl), LibTorch's common headers precompiled once
# (--config=pch, bazel/pch.bzl); at -O1 (.bazelrc says why).
bazel test --config=ci //... 2>&1 | tee -a "$log"
# examples/consumer: a separate workspace that uses the engine as another
# team would (dist_engine_dependencies() and the public targets only), with
# its own tests on the simulator. Its own Bazel server, stopped afterwards.
# One translation unit per library at -O1 here too (--define=unity=true
# --copt=-O1, what --config=ci sets): compiling the engine's sources one by
# one took a fifth of CI's time. Not the precompiled header: building it
# took as long as it saved over the engine's libraries alone.
(cd examples/consumer && bazel test --define=unity=true --copt=-O1 //... && bazel shutdown) 2>&1 |
  tee -a "$log"
# The simulator suites under ThreadSanitizer (the process, hosts and
# cross-check suites run real processes through uninstrumented Open MPI and
# Gloo: not TSan's business; the model suites build torch::nn modules in
# several threads, whose locks inside the uninstrumented LibTorch TSan cannot
# see, so it reports false races; the strategy suites too, and they also
# meet libstdc++'s benign locale-cache race in std::ctype<char>::narrow, GCC
# PR 77704, through std::regex).
# And engine-launch's store server, whose thread serves LibTorch's clients.
bazel test --config=tsan --config=unity -- //sim/... //testing/... //tools/launch:store_server_test \
  -//testing/process/... -//testing/hosts/... -//testing/cross_check/... -//testing/model/... \
  -//testing/strategy/... \
  2>&1 | tee -a "$log"
# The engine's unit tests and every simulator suite under AddressSanitizer
# (with LeakSanitizer) and UndefinedBehaviorSanitizer at once; not the
# process suites, as for TSan. The property suites draw a quarter of their
# cases here (RapidCheck's max_success, same seed): the paths are the main
# phase's, which draws them all.
# --build_tests_only: what no test uses (the runner's tools) is not built.
bazel test --config=asan --config=ubsan --config=unity --config=pch --build_tests_only \
  --test_env=RC_PARAMS=max_success=25 -- //engine/... //sim/... //testing/... \
  //tools/launch:store_server_test \
  -//engine/dist/backends/nccl/... -//testing/process/... -//testing/hosts/... \
  -//testing/cross_check/... 2>&1 | tee -a "$log"
# The nccl backend builds and links against the CUDA toolkit here; without a
# GPU its test checks that creating it fails with a clear error. In the main
# phase's output folder (no platform suffix): only what --define=cuda=true
# selects is compiled again, not the libraries beneath it.
bazel test --config=cuda --config=ci --platform_suffix= //engine/dist/backends/nccl/... 2>&1 |
  tee -a "$log"
# Every libFuzzer target (clang, AddressSanitizer, UndefinedBehaviorSanitizer)
# for a bounded time on its seed corpus.
bash tools/fuzz/fuzz.sh 2>&1 | tee -a "$log"

# LibTorch 2.x. The GPU runner as a GPU machine runs it, up to where a GPU is
# needed: no network (a network namespace of its own), no Bazel (a bazel on
# the PATH that fails), the carried GoogleTest and RapidCheck (.gpu-deps). It
# runs the gloo backend in processes against 2.x too.
bash ci/gpu_deps.sh
no_bazel=$(mktemp -d)
printf '#!/bin/sh\necho "the GPU machines have no Bazel" >&2\nexit 127\n' >"$no_bazel/bazel"
chmod +x "$no_bazel/bazel"
# A new network namespace has only loopback, and that down: bring it up for
# the gloo steps, which connect over 127.0.0.1.
PATH="$no_bazel:$PATH" TORCH_PYTHON=.venv/bin/python BUILD_TYPE=None \
  unshare -n bash -c 'ip link set lo up && exec bash ci/gpu.sh --rehearse' 2>&1 | tee -a "$log"
rm -rf "$no_bazel"
bash ci/cmake.sh 2>&1 | tee -a "$log"

# One closing line for readers of the log: test targets, rehearsal steps and
# CMake tests passed over all runs.
passed=$(grep -oE '[0-9]+ tests? pass' "$log" | awk '{sum += $1} END {print sum + 0}')
rehearsed=$(grep -oE '^gpu rehearsal: [0-9]+ passed' "$log" | grep -oE '[0-9]+')
cmake_tests=$(grep -oE '[0-9]+ tests failed out of [0-9]+' "$log" | awk '{print $NF}')
echo "all: $((passed + rehearsed + cmake_tests)) passed, 0 failed"
