#!/usr/bin/env bash
# A failed test prints one command; running what it says reproduces the
# failure: the same counterexample for a property, the same seed otherwise.
#   repro_test.sh DEMO_BINARY
set -uo pipefail
demo=$1
fail() { echo "FAIL: $*"; exit 1; }

# The command's parts, as a shell would pass them: filter and environment.
run_printed() {
  local command=$1
  local filter rc seed
  filter=$(sed -n 's/.*--test_filter=\([^ ]*\).*/\1/p' <<<"$command")
  seed=$(sed -n 's/.*--test_env=SIM_SEED=\([^ ]*\).*/\1/p' <<<"$command")
  rc=$(sed -n "s/.*--test_env=RC_PARAMS='\([^']*\)'.*/\1/p" <<<"$command")
  SIM_SEED=$seed RC_PARAMS=$rc "$demo" --gtest_filter="$filter" 2>&1
}

first=$(RC_PARAMS="seed=11" TEST_TARGET=//testing:repro_demo "$demo" --gtest_filter=Planted.NoMultipleOfSeven 2>&1)
command=$(grep '^Reproduce with: ' <<<"$first" | sed 's/^Reproduce with: //')
[[ $(grep -c '^Reproduce with: ' <<<"$first") == 1 ]] || fail "expected one command, got: $first"
[[ $command == "bazel test //testing:repro_demo --test_filter=Planted.NoMultipleOfSeven --test_env=SIM_SEED=1 --test_env=RC_PARAMS='"*reproduce=* ]] ||
  fail "unexpected command: $command"
counterexample=$(grep -A1 '^unsigned int:' <<<"$first")
[[ -n $counterexample ]] || fail "no counterexample in: $first"
again=$(run_printed "$command")
grep -q 'Falsifiable' <<<"$again" || fail "the command did not fail again: $again"
[[ $(grep -A1 '^unsigned int:' <<<"$again") == "$counterexample" ]] ||
  fail "a different counterexample: $again"

# A plain test: the command carries the seed that made it fail.
seeded=$(SIM_SEED=7 TEST_TARGET=//testing:repro_demo "$demo" --gtest_filter=Planted.SeedSeven 2>&1)
command=$(grep '^Reproduce with: ' <<<"$seeded" | sed 's/^Reproduce with: //')
[[ $command == "bazel test //testing:repro_demo --test_filter=Planted.SeedSeven --test_env=SIM_SEED=7" ]] ||
  fail "unexpected command: $command"
again=$(run_printed "$command")
grep -q '\[  FAILED  \] Planted.SeedSeven' <<<"$again" || fail "the seed did not fail again: $again"
# Passing tests print nothing.
out=$("$demo" --gtest_filter=Planted.SeedSeven 2>&1)
grep -q 'Reproduce with' <<<"$out" && fail "a passing test printed a command: $out"
echo "PASS"
