#!/usr/bin/env bash
# Runs one job over emulated hosts (emulated_hosts.sh) the way srun starts
# a job step on two nodes, as a test:
#   srun_on_hosts.sh HOSTS PER_HOST COMMAND...
# Each host runs PER_HOST copies of COMMAND with the variables srun gives its
# tasks (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS,
# SLURM_NNODES, SLURM_NODELIST=host[1-HOSTS], SLURM_TASKS_PER_NODE), and
# nothing of torchrun's. Passes when every task exits with
# SRUN_ON_HOSTS_STATUS (default 0); each is ended after 300 s. Every task's
# output is printed, task by task, at the end. SRUN_ON_HOSTS_DURING: shell
# commands run here once the tasks have started, with emulated_hosts.sh's
# functions at hand (link_down 2 pulls host2's cable).
set -euo pipefail
source "$(dirname "$0")/emulated_hosts.sh"

hosts=$1 per_host=$2
shift 2
hosts_up "$hosts"
for ((host = 1; host <= hosts; host++)); do
  for ((local = 0; local < per_host; local++)); do
    task=$(((host - 1) * per_host + local))
    start_logged "task$task" on_host "$host" \
      env -u RANK -u LOCAL_RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT \
      SLURM_PROCID=$task SLURM_LOCALID=$local SLURM_NODEID=$((host - 1)) \
      SLURM_NTASKS=$((hosts * per_host)) SLURM_NNODES="$hosts" \
      SLURM_NODELIST="host[1-$hosts]" SLURM_TASKS_PER_NODE="$per_host(x$hosts)" \
      timeout -k 10 300 "$@"
  done
done
[[ -z ${SRUN_ON_HOSTS_DURING:-} ]] || eval "$SRUN_ON_HOSTS_DURING"
await_logged "${SRUN_ON_HOSTS_STATUS:-0}"
