#!/usr/bin/env bash
# The job-wide watchdog over 2 emulated hosts x 2 gloo ranks: engine-launch
# --stall-timeout 5 --max-restarts 1 on each host (stall_main.cc). On the
# first attempt rank 3, on host2, is stuck in its own code while the others
# wait in all_reduce #6. Node 0's launcher (host1) prints one diagnosis of
# all four ranks, with host2's records sent through the job's store, that
# names rank 3; both hosts restart once, and the job completes.
#   stall_2_hosts_test.sh ENGINE_LAUNCH STALL_BIN
set -euo pipefail
source "$(dirname "$0")/emulated_hosts.sh"
source "$TEST_SRCDIR/$TEST_WORKSPACE/examples/test_lib.sh"
launcher=$1 stall=$2
export TMPDIR=${TEST_TMPDIR:-$(mktemp -d)}
hosts_up 2
for host in 1 2; do
  start_logged "host$host" on_host "$host" timeout -k 10 200 "$launcher" \
    --nnodes 2 --node-rank $((host - 1)) --nproc-per-node 2 --master-addr "$(host_address 1)" \
    --master-port 29500 --stall-timeout 5 --max-restarts 1 "$stall" gloo
done
await_logged || { echo "FAIL: a host's launcher did not exit 0"; exit 1; }
host1=$(cat "$EMULATED_HOSTS_DIR/log.host1")
host2=$(cat "$EMULATED_HOSTS_DIR/log.host2")
expect "engine-launch: no rank of the job started or ended a call for 5 s while one was in a call" "$host1"
expect "rank 3 has no call in flight (last: all_reduce #5 (group \[0-3\], 1 KiB Float\[256\], sum)) while ranks 0-2 are in all_reduce #6" "$host1"
expect "node 0 found the job stalled; sent it this node's flight records" "$host2"
expect "restarting every rank (restart 1 of 1)" "$host1"
for host in "$host1" "$host2"; do
  [ "$(grep -c "all 6 calls done" <<<"$host")" = 2 ] || { echo "FAIL: the restarted job did not complete"; exit 1; }
done
echo "PASS: host1 diagnosed the stall of rank 3 on host2, and the restarted job completed"
