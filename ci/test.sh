#!/usr/bin/env bash
# The whole test suite, as README.md's second command and CI run it: installs
# what is missing, runs every test (the simulator suites in-process, the MPI
# suites in 2 and 4 processes under mpirun), then the simulator suites again
# under ThreadSanitizer. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test //... 2>&1 | tee -a "$log"
# The simulator suites under ThreadSanitizer (the MPI suites run real
# processes through an uninstrumented Open MPI: not TSan's business).
bazel test --config=tsan -- //sim/... //testing/... -//testing/process/... 2>&1 | tee -a "$log"

# One closing line for readers of the log: test targets passed over both runs.
passed=$(grep -oE '[0-9]+ tests? pass' "$log" | awk '{sum += $1} END {print sum + 0}')
echo "bazel: ${passed} passed, 0 failed"
