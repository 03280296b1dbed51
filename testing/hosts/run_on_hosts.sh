#!/usr/bin/env bash
# Runs one job over emulated hosts (emulated_hosts.sh), as a test:
#   run_on_hosts.sh HOSTS PER_HOST ENGINE_LAUNCH COMMAND...
# Host i runs `ENGINE_LAUNCH --nnodes HOSTS --node-rank i-1 --nproc-per-node
# PER_HOST` with the store on host1. Passes when every host's engine-launch
# exits 0; each is ended after RUN_ON_HOSTS_TIMEOUT seconds (default 300).
# RUN_ON_HOSTS_IFNAME=1 sets GLOO_SOCKET_IFNAME to each host's interface.
# Every host's output is printed, host by host, at the end; with
# RUN_ON_HOSTS_LIVE=1, each line as it comes instead, as "host<i>: LINE"
# (for a reader that times them, tools/bench/recovery.py --hosts).
set -euo pipefail
source "$(dirname "$0")/emulated_hosts.sh"

hosts=$1 per_host=$2 launcher=$3
shift 3
hosts_up "$hosts"
live=()  # RUN_ON_HOSTS_LIVE's pipelines
for ((host = 1; host <= hosts; host++)); do
  ifname=()
  [[ ${RUN_ON_HOSTS_IFNAME:-0} == 1 ]] && ifname=(env "GLOO_SOCKET_IFNAME=eth$host")
  command=(on_host "$host" "${ifname[@]}" timeout -k 10 "${RUN_ON_HOSTS_TIMEOUT:-300}" "$launcher"
    --nnodes "$hosts" --node-rank $((host - 1)) --nproc-per-node "$per_host"
    --master-addr "$(host_address 1)" --master-port 29500 "$@")
  if [[ ${RUN_ON_HOSTS_LIVE:-0} == 1 ]]; then
    "${command[@]}" 2>&1 | sed -u "s/^/host$host: /" &
    live+=($!)
  else
    start_logged "host$host" "${command[@]}"
  fi
done
if ((${#live[@]} > 0)); then
  failed=0
  for pipeline in "${live[@]}"; do wait "$pipeline" || failed=1; done
  exit "$failed"
fi
await_logged
