#!/usr/bin/env bash
# Runs one job over emulated hosts (emulated_hosts.sh) under Open MPI's
# mpirun, as on a cluster, as a test:
#   mpirun_on_hosts.sh HOSTS PER_HOST COMMAND...
# PER_HOST: one count for every host, or a count per host, comma-separated
# ("3,1": uneven hosts).
# mpirun runs on host1 and starts each other host's daemon through
# enter_host.sh (the rsh agent, in ssh's place); ranks and daemons talk TCP
# over the hosts' network only. Passes when mpirun exits 0 within 300 s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/emulated_hosts.sh"

hosts=$1 per_host=$2
shift 2
hosts_up "$hosts"
export EMULATED_HOSTS_MAP
EMULATED_HOSTS_MAP=$(host_map)
IFS=, read -r -a counts <<<"$per_host"
list="" ranks=0
for ((host = 1; host <= hosts; host++)); do
  count=${counts[host - 1]:-${counts[0]}}
  list+="${list:+,}host$host:$count"
  ranks=$((ranks + count))
done
# More ranks than cores: ranks yield instead of busy-polling.
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_orte_tmpdir_base="${TEST_TMPDIR:-/tmp}"
export OMPI_MCA_plm_rsh_agent="$here/enter_host.sh"
export OMPI_MCA_btl=self,tcp
export OMPI_MCA_btl_tcp_if_include="$EMULATED_HOSTS_SUBNET.0/24"
export OMPI_MCA_oob_tcp_if_include="$EMULATED_HOSTS_SUBNET.0/24"
on_host 1 timeout -k 10 300 mpirun --allow-run-as-root --oversubscribe --bind-to none \
  -np "$ranks" --host "$list" "$@"
