#!/usr/bin/env bash
# An rsh agent for Open MPI's launcher (plm_rsh_agent) on emulated hosts:
#   enter_host.sh [OPTIONS] HOST COMMAND...
# runs COMMAND (one shell line, as ssh runs it) inside HOST's namespaces,
# found in EMULATED_HOSTS_MAP (emulated_hosts.sh's host_map). ssh's options,
# which mpirun may pass, are ignored.
set -euo pipefail
while [[ $1 == -* ]]; do shift; done
host=$1
shift
holder=""
for entry in ${EMULATED_HOSTS_MAP:?"set by mpirun_on_hosts.sh"}; do
  [[ ${entry%%=*} == "$host" ]] && holder=${entry#*=}
done
[[ -n $holder ]] || { echo "enter_host.sh: no emulated host named $host" >&2; exit 255; }
exec nsenter -t "$holder" -n -u -m -- bash -c "$*"
