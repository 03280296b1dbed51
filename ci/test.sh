#!/usr/bin/env bash
# The whole test suite, as README.md's second command and CI run it: installs
# what is missing, runs every test (the simulator suites in-process, the
# process suites over mpi and gloo in 2 and 4 processes, engine-launch's
# tests), the consumer example workspace's tests, then the simulator suites
# again under ThreadSanitizer, then builds
# the nccl backend with --config=cuda. First, that the README and docs/ name
# only files that exist. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/check_docs.sh

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test //... 2>&1 | tee -a "$log"
# examples/consumer: a separate workspace that uses the engine as another
# team would (dist_engine_dependencies() and the public targets only), with
# its own tests on the simulator. Its own Bazel server, stopped afterwards.
(cd examples/consumer && bazel test //... && bazel shutdown) 2>&1 | tee -a "$log"
# The simulator suites under ThreadSanitizer (the process suites run real
# processes through uninstrumented Open MPI and Gloo: not TSan's business; the
# model suites build torch::nn modules in several threads, whose locks inside
# the uninstrumented LibTorch TSan cannot see, so it reports false races; the
# strategy suites too, and they also meet libstdc++'s benign locale-cache race
# in std::ctype<char>::narrow, GCC PR 77704, through std::regex).
bazel test --config=tsan -- //sim/... //testing/... -//testing/process/... -//testing/model/... \
  -//testing/strategy/... \
  2>&1 | tee -a "$log"
# The nccl backend builds and links against the CUDA toolkit here; without a
# GPU its test checks that creating it fails with a clear error.
bazel test --config=cuda //engine/dist/backends/nccl/... 2>&1 | tee -a "$log"

# One closing line for readers of the log: test targets passed over all runs.
passed=$(grep -oE '[0-9]+ tests? pass' "$log" | awk '{sum += $1} END {print sum + 0}')
echo "bazel: ${passed} passed, 0 failed"
