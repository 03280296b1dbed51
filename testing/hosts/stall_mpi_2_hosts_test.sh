#!/usr/bin/env bash
# The job-wide watchdog under mpirun over 2 emulated hosts x 2 mpi ranks:
# engine-watch --stall-timeout 5 --job-store host1:PORT in front of every
# rank (stall_main.cc). Rank 3, on host2, is stuck in its own code while the
# others wait in all_reduce #6. Global rank 0's engine-watch (host1) prints
# one diagnosis of all four ranks, with host2's records sent through the
# job's store, that names rank 3; mpirun ends the job with status 124.
# Ranks that compute outside any call for longer than the timeout are not
# stalled, and the job ends with 0; an address that is not HOST:PORT is
# refused before the rank starts.
#   stall_mpi_2_hosts_test.sh MPIRUN_ON_HOSTS ENGINE_WATCH STALL_BIN
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/examples/test_lib.sh"
mpirun_on_hosts=$1 watch=$2 stall=$3
export TMPDIR=${TEST_TMPDIR:-$(mktemp -d)}
bad=$(OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=1 \
  OMPI_COMM_WORLD_SIZE=1 PMIX_NAMESPACE=test "$watch" --stall-timeout 5 --job-store host1 \
  "$stall" mpi 2>&1)
status=$?
[ $status = 2 ] || { echo "$bad"; echo "FAIL: a bad --job-store exited $status, expected 2"; exit 1; }
expect 'engine-watch: --job-store needs HOST:PORT .*, got "host1"' "$bad"

output=$(bash "$mpirun_on_hosts" 2 2 "$watch" --stall-timeout 5 --job-store host1:29511 \
  "$stall" mpi 2>&1)
status=$?
[ $status = 124 ] || { echo "$output"; echo "FAIL: mpirun exited $status, expected 124"; exit 1; }
expect "engine-watch: no rank of the job started or ended a call for 5 s while one was in a call" "$output"
expect "node 0 found the job stalled; sent it this node's flight records" "$output"
expect "rank 3 has no call in flight (last: all_reduce #5 (group \[0-3\], 1 KiB Float\[256\], sum)) while ranks 0-2 are in all_reduce #6" "$output"
records=$(grep -o "the flight records are in .*" <<<"$output" | cut -d' ' -f6)
for r in 0 1 2 3; do
  [ -f "$records/flight_rank$r.json" ] ||
    { echo "$output"; echo "FAIL: rank $r's flight record is not in \"$records\""; exit 1; }
done

output=$(bash "$mpirun_on_hosts" 2 2 "$watch" --stall-timeout 5 --job-store host1:29511 \
  "$stall" mpi computing 12 2>&1)
status=$?
[ $status = 0 ] || { echo "$output"; echo "FAIL: the computing job exited $status"; exit 1; }
[ "$(grep -c "all 6 calls done" <<<"$output")" = 4 ] ||
  { echo "$output"; echo "FAIL: the computing job did not complete"; exit 1; }
! grep -q "stalled\|lost the job's store" <<<"$output" ||
  { echo "$output"; echo "FAIL: ranks computing outside any call were taken for stalled"; exit 1; }
echo "PASS: rank 0's engine-watch diagnosed the stall of rank 3 on host2; computing is no stall"
