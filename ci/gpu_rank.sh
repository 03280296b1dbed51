#!/usr/bin/env bash
# Runs one rank of a job whose ranks share a GPU: NCCL refuses two ranks of
# one communicator on the same device of the same host ("Duplicate GPU
# detected"), so each rank claims a host of its own (NCCL_HOSTID), and NCCL
# connects them over sockets on the loopback interface as if they were on
# two machines. Under a launcher that sets LOCAL_RANK (engine-launch):
#   engine-launch --nproc-per-node 2 ci/gpu_rank.sh BINARY ARGS...
set -euo pipefail
export NCCL_HOSTID="dist-engine-rank-${LOCAL_RANK:?run under a launcher that sets LOCAL_RANK}"
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
exec "$@"
