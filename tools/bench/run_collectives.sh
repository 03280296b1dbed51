#!/usr/bin/env bash
# The collectives benchmark and its peers, one after the other in one run, with
# the same rank count and sweep:
#   sim  -> ours on the simulator, then plain Open MPI (mpi_peer under mpirun)
#   mpi  -> ours on the mpi backend under mpirun, then plain Open MPI
#   gloo -> ours on the gloo backend under engine-launch, then PyTorch's
#           torch.distributed gloo (Debian's python3-torch), also under
#           engine-launch: Debian's torchrun 1.13 fails on Python 3.11
#           (AttributeError in its elastic Std parsing), and the peer only
#           needs torchrun's variables
#   bash tools/bench/run_collectives.sh [ranks] [ops] [backends]
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=${1:-4}
ops=${2:-all_reduce}
backends=${3:-sim}
sweep=(--min-bytes 4K --max-bytes 64M --factor 4)
bazel build //tools/bench:collectives //tools/bench:mpi_peer //tools/launch:engine-launch
mkdir -p bench/out  # JSON records of each run (not committed; bench/RESULTS.md and HISTORY.md are the record)
ours=bazel-bin/tools/bench/collectives
# More ranks than cores: Open MPI must yield instead of busy-polling.
mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$ranks")
export OMPI_MCA_mpi_yield_when_idle=1
mpi_peer() {
  for op in ${ops//,/ }; do
    "${mpirun[@]}" bazel-bin/tools/bench/mpi_peer --ops "$op" "${sweep[@]}"
  done
}
for backend in ${backends//,/ }; do
  case "$backend" in
    sim)
      "$ours" --ranks "$ranks" --ops "$ops" "${sweep[@]}" --json "bench/out/collectives_sim_${ranks}.json"
      mpi_peer ;;
    mpi)
      "${mpirun[@]}" "$ours" --backend mpi --ops "$ops" "${sweep[@]}" --json "bench/out/collectives_mpi_${ranks}.json"
      mpi_peer ;;
    gloo)
      bazel-bin/tools/launch/engine-launch --nproc-per-node "$ranks" \
        "$ours" --backend gloo --ops "$ops" "${sweep[@]}" --json "bench/out/collectives_gloo_${ranks}.json"
      bazel-bin/tools/launch/engine-launch --nproc-per-node "$ranks" \
        /usr/bin/python3 tools/bench/torch_gloo_peer.py --ops "$ops" "${sweep[@]}" ;;
    *) echo "unknown backend $backend (sim, mpi, gloo)" >&2; exit 2 ;;
  esac
done
