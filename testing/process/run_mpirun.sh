#!/usr/bin/env bash
# Runs a test binary in N processes under mpirun, on this machine only.
#   run_mpirun.sh N BINARY [ARGS...]
set -euo pipefail
ranks=$1
shift
# More ranks than cores: ranks must yield instead of busy-polling. Session
# files go to the test's own temporary folder.
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_orte_tmpdir_base="${TEST_TMPDIR:-/tmp}"
# Loopback TCP between the ranks: Open MPI's shared-memory transport (vader)
# crashes inside Bazel's linux-sandbox (segfaults in its fragment handling),
# while it works outside; the benchmark, which runs outside, keeps it.
export OMPI_MCA_btl=self,tcp
export OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_oob_tcp_if_include=lo
exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" "$@"
