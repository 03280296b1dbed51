#!/usr/bin/env bash
# The collectives benchmark on the simulator and its peer, Open MPI, with the
# same rank count and sweep, one after the other in one run.
#   bash tools/bench/run_collectives.sh [ranks] [ops]
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=${1:-4}
ops=${2:-all_reduce}
sweep=(--min-bytes 4K --max-bytes 64M --factor 4)
bazel build //tools/bench:collectives //tools/bench:mpi_peer
bazel-bin/tools/bench/collectives --ranks "$ranks" --ops "$ops" "${sweep[@]}" --json "bench/collectives_sim_${ranks}.json"
for op in ${ops//,/ }; do
  # More ranks than cores: Open MPI must yield instead of busy-polling.
  OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
    bazel-bin/tools/bench/mpi_peer --ops "$op" "${sweep[@]}"
done
