#!/usr/bin/env bash
# SUITE_SOURCE through test_main, on a binary that several sources share:
# the tests that one source defines (every one of them, and no other), less
# what GTEST_FILTER leaves out; a source that defines no test there is
# refused with a message.
#   suite_source_test.sh BINARY SOURCE   (SOURCE: one of BINARY's sources)
set -uo pipefail
binary=$1 source=$2
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# gtest's listing, as "Suite.Test" lines.
listed() {
  "$binary" --gtest_list_tests | awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }'
}
defined=$(grep -oE '^(TEST|TEST_F|HARNESS_PROP)\([A-Za-z0-9_]+, *[A-Za-z0-9_]+' "$source" |
  sed -E 's/^[A-Z_]+\(([A-Za-z0-9_]+), */\1./' | sort)
[ -n "$defined" ] || fail "$source defines no test this script can see"

[ "$(listed | sort)" != "$defined" ] || fail "without SUITE_SOURCE, the binary lists only $source's tests"
got=$(SUITE_SOURCE=$(basename "$source") listed | sort)
[ "$got" = "$defined" ] || fail "SUITE_SOURCE=$(basename "$source") listed:
$got
where $source defines:
$defined"

first=$(head -1 <<<"$defined")
got=$(SUITE_SOURCE=$(basename "$source") GTEST_FILTER="-$first" listed | sort)
[ "$got" = "$(tail -n +2 <<<"$defined")" ] || fail "GTEST_FILTER=-$first did not leave out $first: $got"

output=$(SUITE_SOURCE=no_such_test.cc "$binary" 2>&1)
status=$?
[ $status = 1 ] || fail "SUITE_SOURCE=no_such_test.cc: exit status $status, expected 1"
grep -qF "SUITE_SOURCE=no_such_test.cc: no test of this binary is defined in a source of one of those names" \
  <<<"$output" || fail "SUITE_SOURCE=no_such_test.cc: no message: $output"

echo "suite_source_test: $failures failures"
[ $failures = 0 ]
